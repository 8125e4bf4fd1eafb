package cni

import (
	"encoding/json"
	"fmt"
)

// A Reader is a family of container runtimes, told apart by the libcni
// they embed: the newest version it reads, and whether it picks a version
// from cniVersions (spec 1.1.0) or only reads cniVersion. A runtime that
// runs a list at a version newer than its libcni knows refuses the
// plugins' results ("unsupported CNI result version").
type Reader struct {
	Name        string
	Newest      string
	CNIVersions bool
}

// KnownReaders are the runtimes in use, from the libcni their releases
// require (their go.mod files): containerd 1.6.20 libcni 1.1.1, 1.7.x
// 1.1.2, 2.0 1.2.3, 2.1 and later 1.3.x (2.4.2: 1.3.1); Podman 4.x and 5.0
// 1.1.2, 5.2 1.2.3; CRI-O up to 1.30 1.1.2. libcni reads cniVersions from
// 1.2 on. test/k8s's TestContainerdMatrix holds the containerd rows to
// what containerd 1.6.20, 1.7.35 and 2.4.2 do.
var KnownReaders = []Reader{
	{Name: "libcni 1.0/1.1 (containerd 1.6, 1.7; Podman 4, 5.0; CRI-O to 1.30)", Newest: "1.0.0"},
	{Name: "libcni 1.2+ (containerd 2.x, Podman 5.2+)", Newest: "1.1.0", CNIVersions: true},
	{Name: "podnet", Newest: CurrentVersion, CNIVersions: true},
}

// VersionFor returns the version r runs list at, or why r cannot run it.
func (r Reader) VersionFor(list *NetworkConfigList) (string, error) {
	var doc struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(list.Bytes, &doc) // list parsed already
	if r.CNIVersions && len(list.CNIVersions) > 0 {
		best := ""
		for _, v := range append([]string{doc.CNIVersion}, list.CNIVersions...) {
			if v != "" && AtLeast(r.Newest, v) && (best == "" || AtLeast(v, best)) {
				best = v
			}
		}
		if best == "" {
			return "", fmt.Errorf("none of cniVersions %q is %s or older", list.CNIVersions, r.Newest)
		}
		return best, nil
	}
	switch {
	case doc.CNIVersion == "":
		return "", fmt.Errorf("no cniVersion, and it does not read cniVersions")
	case !AtLeast(r.Newest, doc.CNIVersion):
		return "", fmt.Errorf("cniVersion %s is newer than %s, the newest it reads", doc.CNIVersion, r.Newest)
	}
	return doc.CNIVersion, nil
}
