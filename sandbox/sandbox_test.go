package sandbox

import (
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "web-0", "run-3f9a1c", "a.b"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a/b", strings.Repeat("a", 43)} {
		if ValidateName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	s := NewStore(t.TempDir())
	name := RandomName("pntest")
	sb, err := s.Create("team", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Delete(name) })
	if !sb.Alive() || netns.IsNetNS(sb.NetNS) != nil {
		t.Fatalf("namespace %s missing", sb.NetNS)
	}
	if _, err := s.Create("team", name); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("duplicate: %v", err)
	}
	sb.IPs = []string{"10.0.0.2"}
	if err := s.Save(sb); err != nil {
		t.Fatal(err)
	}
	all, err := s.List()
	if err != nil || len(all) != 1 || all[0].ID != sb.ID || all[0].IPs[0] != "10.0.0.2" || all[0].Namespace != "team" {
		t.Fatalf("list %+v %v", all, err)
	}
	if err := s.Delete(name); err != nil {
		t.Fatal(err)
	}
	if sb.Alive() {
		t.Error("namespace survived Delete")
	}
	if err := s.Delete(name); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if all, _ := s.List(); len(all) != 0 {
		t.Errorf("records left: %v", all)
	}
}
