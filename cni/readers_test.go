package cni

import (
	"strings"
	"testing"
)

// Which runtimes run a list, and at which version: a 1.1.0 cniVersion is
// refused by containerd 1.6's libcni, a 1.0.0 one with cniVersions is run
// at 1.0.0 by it and at 1.1.0 by runtimes that read cniVersions.
func TestReaderVersionFor(t *testing.T) {
	old, newer, podnet := KnownReaders[0], KnownReaders[1], KnownReaders[2]
	for _, tc := range []struct {
		doc                  string
		wantOld, wantNew, pn string // "!" + part of the error when refused
	}{
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"p"}]}`, "!newer than 1.0.0", "1.1.0", "1.1.0"},
		{`{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"n","plugins":[{"type":"p"}]}`, "1.0.0", "1.1.0", "1.1.0"},
		{`{"cniVersions":["1.1.0"],"name":"n","plugins":[{"type":"p"}]}`, "!no cniVersion", "1.1.0", "1.1.0"},
		{`{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"p"}]}`, "0.4.0", "0.4.0", "0.4.0"},
	} {
		list, err := ParseNetworkConfigList([]byte(tc.doc), "test")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			r    Reader
			want string
		}{{old, tc.wantOld}, {newer, tc.wantNew}, {podnet, tc.pn}} {
			got, err := c.r.VersionFor(list)
			if refused, ok := strings.CutPrefix(c.want, "!"); ok {
				if err == nil || !strings.Contains(err.Error(), refused) {
					t.Errorf("%s on %s: %q %v, want refused (%s)", c.r.Name, tc.doc, got, err, refused)
				}
			} else if err != nil || got != c.want {
				t.Errorf("%s on %s: %q %v, want %s", c.r.Name, tc.doc, got, err, c.want)
			}
		}
	}
}
