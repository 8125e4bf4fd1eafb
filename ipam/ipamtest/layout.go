package ipamtest

import (
	"strings"

	"github.com/podnet/podnet/ipam"
)

// testNewerLayout: the first allocation of a store records its layout;
// an allocator that meets a newer layout's marker under the next prefix,
// a marker of a newer layout, or its own layout marked superseded,
// refuses with the layout and marker named, and writes nothing.
func testNewerLayout(e env) {
	t := e.t
	base := e.keys.Prefix
	keys := ipam.Keys{Prefix: base + "v2/"}
	alloc := func() *ipam.Allocator { return ipam.New(e.store, ipam.Config{Keys: keys}) }
	a := alloc()
	mustPool(t, a, "p", "10.21.0.0/16", 0)
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h1", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := e.store.Get(ctxT(t), keys.Layout())
	if err != nil || !strings.Contains(string(kv.Value), `"layout":2`) {
		t.Fatalf("marker after the first allocation: %s, %v", kv.Value, err)
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := e.store.Write(ctxT(t), ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(key string) {
		t.Helper()
		if _, err := e.store.Write(ctxT(t), ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Delete: true}); err != nil {
			t.Fatal(err)
		}
	}
	next := ipam.Keys{Prefix: base + "v3/"}
	for _, tc := range []struct {
		name string
		set  func()
		want []string
	}{
		{"next prefix", func() { put(next.Layout(), `{"layout":3}`) }, []string{next.Prefix, next.Layout()}},
		{"superseded", func() { del(next.Layout()); put(keys.Layout(), `{"layout":2,"supersededBy":"`+next.Prefix+`"}`) },
			[]string{"superseded", next.Prefix, keys.Layout()}},
		{"newer marker", func() { put(keys.Layout(), `{"layout":3}`) }, []string{"layout v3", keys.Layout()}},
	} {
		tc.set()
		before, err := e.store.List(ctxT(t), base)
		if err != nil {
			t.Fatal(err)
		}
		// n2 has no index yet: the moment the layout is read.
		_, err = alloc().AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h2", Node: "n2", Num4: 1})
		if ipam.KindOf(err) != ipam.KindInvalid {
			t.Fatalf("%s: %v, want a refusal", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", tc.name, err, w)
			}
		}
		after, err := e.store.List(ctxT(t), base)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("%s: %d keys before the refusal, %d after", tc.name, len(before), len(after))
		}
		for i := range min(len(before), len(after)) {
			if before[i].ModRevision != after[i].ModRevision {
				t.Errorf("%s: %s written", tc.name, after[i].Key)
			}
		}
	}
}
