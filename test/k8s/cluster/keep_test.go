package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

func TestKeepMode(t *testing.T) {
	for _, tc := range []struct {
		env, want string
		err       bool
	}{
		{"", "", false},
		{"0", "", false},
		{"1", "1", false},
		{"failed", "failed", false},
		{"yes", "", true},
	} {
		t.Setenv(keepEnv, tc.env)
		got, err := keepMode()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s=%q: %q, %v; want %q, error %v", keepEnv, tc.env, got, err, tc.want, tc.err)
		}
	}
}

// A kept cluster's namespaces must outlive the test: their cleanups are
// skipped, and only theirs.
func TestUnlessKeptSkipsCleanups(t *testing.T) {
	for _, kept := range []bool{false, true} {
		c := &Cluster{kept: kept}
		ran := false
		t.Run(fmt.Sprintf("kept=%v", kept), func(t *testing.T) {
			unlessKept{TB: t, c: c}.Cleanup(func() { ran = true })
		})
		if ran == kept {
			t.Errorf("kept %v: cleanup ran %v", kept, ran)
		}
	}
}

// The plan a kept cluster writes is what a reaper reads back from its
// stdin, and one without done reaps.
func TestKeptPlanReadBack(t *testing.T) {
	plan := reaperMsg{
		Dir: "/tmp/podnet-k8s-1", ContainerdSocks: []string{"/tmp/podnet-k8s-1/nodes/node-1/containerd.sock"},
		CgroupRoots: []string{"podnet-k8s-0a1b2c3d"}, NetNS: []string{"podnet-test-1", "podnet-test-2"},
		HostDirs: []string{"/opt/cni", "/opt/cni/bin"}, Sysctls: map[string]string{"vm/overcommit_memory": "0"},
		Procs: []procID{{PID: 10, Start: 100}, {PID: 11, Start: 101}},
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	got, done := readPlan(bytes.NewReader(append(b, '\n')))
	if done {
		t.Fatal("plan read as done: the reaper would not reap")
	}
	if !reflect.DeepEqual(*got, plan) {
		t.Errorf("read back %+v\nwant %+v", *got, plan)
	}
}
