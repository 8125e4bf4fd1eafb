package interop

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestVersionAndValidate asks every upstream plugin for its versions
// through both libraries, and validates the scenarios' networks with
// both: same versions, same verdicts, same capabilities. It needs no root.
func TestVersionAndValidate(t *testing.T) {
	dir := upstreamBinDir(t)
	ctx := context.Background()
	p := newPodnetRunner([]string{dir}, t.TempDir(), nil)
	l := newLibcniRunner([]string{dir}, t.TempDir(), nil)
	for _, pkg := range upstreamPkgs {
		plugin := filepath.Base(pkg)
		if plugin == "cnitool" {
			continue
		}
		pv, err := p.versionInfo(ctx, plugin)
		if err != nil {
			t.Errorf("podnet VERSION %s: %v", plugin, err)
			continue
		}
		lv, err := l.versionInfo(ctx, plugin)
		if err != nil {
			t.Errorf("libcni VERSION %s: %v", plugin, err)
			continue
		}
		if !slices.Equal(pv, lv) {
			t.Errorf("VERSION %s: podnet %v, libcni %v", plugin, pv, lv)
		}
	}

	type verdict struct {
		ok   bool
		caps []string
	}
	validate := func(conf string) (ours, theirs verdict) {
		t.Helper()
		c := []byte(conf)
		pl, err := p.list(c)
		if err != nil {
			t.Fatalf("podnet parse: %v", err)
		}
		caps, err := p.rt.ValidateNetworkList(ctx, pl)
		ours = verdict{err == nil, caps}
		ll, err := l.parse(c)
		if err != nil {
			t.Fatalf("libcni parse: %v", err)
		}
		caps, err = l.c.ValidateNetworkList(ctx, ll)
		slices.Sort(caps)
		theirs = verdict{err == nil, caps}
		return ours, theirs
	}
	for _, sc := range scenarios {
		for _, v := range append([]string{"0.3.0"}, versions...) {
			conf := strings.NewReplacer("%VERSION%", v, "%NAME%", "pnio-validate", "%DIR%", t.TempDir()).Replace(sc.conf)
			ours, theirs := validate(conf)
			if !ours.ok || !slices.Equal(ours.caps, theirs.caps) || ours.ok != theirs.ok {
				t.Errorf("%s at %s: podnet %+v, libcni %+v", sc.name, v, ours, theirs)
			}
		}
	}
	// A plugin that is not there fails both.
	ours, theirs := validate(`{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"pnio-missing"}]}`)
	if ours.ok || theirs.ok {
		t.Errorf("missing plugin: podnet ok=%v, libcni ok=%v; want both to fail", ours.ok, theirs.ok)
	}
	// A missing IPAM plugin: podnet looks at IPAM plugins too, libcni
	// only at the chain's own plugins, so its ADD fails later instead.
	ours, theirs = validate(`{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp","ipam":{"type":"pnio-missing"}}]}`)
	if ours.ok || !theirs.ok {
		t.Errorf("missing IPAM plugin: podnet ok=%v (want false), libcni ok=%v (known: true)", ours.ok, theirs.ok)
	}
}
