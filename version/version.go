package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker: -X github.com/podnet/podnet/version.version=0.1.0
// (and .revision, where the build has no VCS information, as in an
// image built from a source archive).
var (
	version  string
	revision string
)

// Info is what a build says about itself.
type Info struct {
	// Version is the release (0.1.0), "0.1.0-dev" for a `make build` of
	// the tree between releases, the module version for `go install
	// ...@v0.1.0`, or "dev" for a plain `go build`.
	Version string `json:"version"`
	// Revision is the commit, "-dirty" when the tree had changes; empty
	// when unknown.
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the running binary's Info.
func Get() Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if in.Version == "" {
			in.Version = "dev"
		}
		return in
	}
	if in.Version == "" {
		in.Version = strings.TrimPrefix(bi.Main.Version, "v")
		if in.Version == "" || in.Version == "(devel)" {
			in.Version = "dev"
		}
	}
	if rev, dirty := vcs(bi); rev != "" && in.Revision == "" {
		in.Revision = rev
		if dirty {
			in.Revision += "-dirty"
		}
	}
	return in
}

func vcs(bi *debug.BuildInfo) (rev string, dirty bool) {
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	return rev, dirty
}

// String is the one-line form: "0.1.0 (abc1234, go1.26.6 linux/amd64)".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (")
	if i.Revision != "" {
		r, dirty := strings.CutSuffix(i.Revision, "-dirty")
		if len(r) > 12 {
			r = r[:12]
		}
		if dirty {
			r += "-dirty"
		}
		b.WriteString(r + ", ")
	}
	b.WriteString(i.GoVersion + " " + i.Platform + ")")
	return b.String()
}
