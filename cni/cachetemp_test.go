package cni

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const cacheWriterChildEnv = "PODNET_CNI_CACHE_WRITER_CHILD"

// halfWritten is the line a writer child prints once half its entry is
// in the temp file.
const halfWritten = "cache writer: half written"

// childEntry is what a writer child writes.
const childEntry = `{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"net1"}`

// TestCacheWriterChild is a writer of the result cache in a process of its
// own, started by startWriter. It runs the real writer (writeFileAtomic)
// and stops halfway through the write. With "die:PATH" it SIGKILLs
// itself there, as a runtime killed during an ADD does. With "hold:PATH"
// it waits for its stdin to close, then finishes the write.
func TestCacheWriterChild(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv(cacheWriterChildEnv), ":")
	if !ok {
		t.Skip("run by the sweep tests")
	}
	if err := writeFileAtomic(path, &stoppedWrite{data: []byte(childEntry), die: mode == "die"}); err != nil {
		t.Fatal(err)
	}
}

// stoppedWrite writes half its data, then dies or waits as the child was
// told.
type stoppedWrite struct {
	data []byte
	die  bool
}

func (s *stoppedWrite) WriteTo(w io.Writer) (int64, error) {
	half := len(s.data) / 2
	n, err := w.Write(s.data[:half])
	if err != nil {
		return int64(n), err
	}
	fmt.Println(halfWritten)
	if s.die {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	m, err := w.Write(s.data[half:])
	return int64(n + m), err
}

// writer is a writer child halfway through writing an entry.
type writer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	temp  string // the temp file it writes
}

// startWriter starts a writer child for path and returns once it is
// halfway through; mode is "die" or "hold" (TestCacheWriterChild). A
// "die" child has been reaped, killed by SIGKILL, when it returns.
func startWriter(t *testing.T, mode, path string) *writer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCacheWriterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), cacheWriterChildEnv+"="+mode+":"+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var out []string
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		if out = append(out, sc.Text()); sc.Text() == halfWritten {
			break
		}
	}
	if len(out) == 0 || out[len(out)-1] != halfWritten {
		t.Fatalf("writer child ended before it was halfway: %q", out)
	}
	w := &writer{cmd: cmd, stdin: stdin}
	var temps []string
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if isTempName(e.Name(), tempPrefix(path)) {
			temps = append(temps, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	if len(temps) != 1 {
		t.Fatalf("writer child halfway: temp files %v, want one", temps)
	}
	w.temp = temps[0]
	if mode == "die" {
		err := cmd.Wait()
		done = true
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("writer child: %v, want killed by SIGKILL", err)
		}
	}
	return w
}

// finish lets a "hold" child complete its write and waits for it.
func (w *writer) finish(t *testing.T) {
	t.Helper()
	w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("writer child: %v", err)
	}
}

// age makes path look unwritten for d.
func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	then := time.Now().Add(-d)
	if err := os.Chtimes(path, then, then); err != nil {
		t.Fatal(err)
	}
}

func resultNames(t *testing.T, cacheDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cacheDir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// A writer SIGKILLed halfway through an entry leaves its temp file.
// Once it has gone unwritten for tempSweepAge, DEL of the attachment
// sweeps it (and no other attachment's), and GC sweeps every dead
// writer's, of any network, even when the network disables GC. Before
// that age both leave it: only a lock-taking writer can be told dead
// sooner.
func TestSweepDeadWritersTemps(t *testing.T) {
	ctx := context.Background()
	del := func(r *Runtime) error { return r.DelNetworkList(ctx, chain(t, "1.1.0", "a"), rtConf) }
	gc := func(r *Runtime) error { return r.GCNetworkList(ctx, chain(t, "1.1.0", "a"), nil) }
	gcDisabled := func(r *Runtime) error {
		list := chain(t, "1.1.0", "a")
		list.DisableGC = true
		return r.GCNetworkList(ctx, list, nil)
	}
	// Files no sweep may take: an entry, a temp of an interface named like
	// a temp, and dot files that are not podnet's temp files.
	bystanders := []string{"net1-keep-eth0", ".net1-c1-eth0.tmp-5.tmp-x", ".net1-c1-eth0.tmp-", ".other", ".x.tmp-abc"}
	// Another attachment's, another network's: a dead writer's all the
	// same, since no process holds their lock.
	others := []string{".net1-c2-eth0.tmp-77", ".net2-c1-eth0.tmp-78"}
	for _, tc := range []struct {
		name  string
		sweep func(*Runtime) error
		age   time.Duration // since the writer died
		gone  []string      // of others: which the sweep removes
		swept bool          // the killed writer's temp
	}{
		{"DEL", del, tempSweepAge + time.Second, nil, true},
		{"GC", gc, tempSweepAge + time.Second, others, true},
		{"GC with disableGC", gcDisabled, tempSweepAge + time.Second, others, true},
		{"DEL right after", del, 0, nil, false},
		{"GC right after", gc, 0, others, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRuntime(t, &fakeExec{})
			path := cachePath(r.CacheDir(), "net1", "c1", "eth0")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			for _, name := range append(slices.Clone(bystanders), others...) {
				p := filepath.Join(filepath.Dir(path), name)
				if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
				age(t, p, time.Hour)
			}
			w := startWriter(t, "die", path)
			age(t, w.temp, tc.age)

			if err := tc.sweep(r); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(bystanders)
			for _, o := range others {
				if !slices.Contains(tc.gone, o) {
					want = append(want, o)
				}
			}
			if !tc.swept {
				want = append(want, filepath.Base(w.temp))
			}
			slices.Sort(want)
			if got := resultNames(t, r.CacheDir()); !slices.Equal(got, want) {
				t.Errorf("results/ after %s: %q, want %q", tc.name, got, want)
			}
		})
	}
}

// A writer in another process that is still writing keeps its temp file
// through DEL and GC, however old the file looks, and completes its
// entry afterwards.
func TestSweepSparesLiveWriter(t *testing.T) {
	ctx := context.Background()
	r := newTestRuntime(t, &fakeExec{})
	path := cachePath(r.CacheDir(), "net1", "c1", "eth0")
	w := startWriter(t, "hold", path)
	age(t, w.temp, time.Hour)

	if err := r.DelNetworkList(ctx, chain(t, "1.1.0", "a"), rtConf); err != nil {
		t.Fatal(err)
	}
	if err := r.GCNetworkList(ctx, chain(t, "1.1.0", "a"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.temp); err != nil {
		t.Fatalf("a live writer's temp file was swept: %v", err)
	}
	w.finish(t)
	if data, err := os.ReadFile(path); err != nil || string(data) != childEntry {
		t.Errorf("entry after the writer finished: %q %v", data, err)
	}
	if got := resultNames(t, r.CacheDir()); !slices.Equal(got, []string{filepath.Base(path)}) {
		t.Errorf("results/ after the write: %q", got)
	}
}

// A writer stopped between creating its temp file and locking it, for
// longer than a sweep waits, finds once it holds the lock that the file
// is gone, and takes another instead of writing one that no name leads
// to.
func TestWriterLocksAfterSweep(t *testing.T) {
	dir := t.TempDir()
	path := cachePath(dir, "net1", "c1", "eth0")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), tempPrefix(path)+"*")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	age(t, tmp.Name(), time.Hour)
	if err := sweepDeadTemps(dir, "."); err != nil {
		t.Fatal(err)
	}
	if _, err := lockTemp(tmp); !errors.Is(err, errTempSwept) {
		t.Fatalf("lock after the sweep: %v, want errTempSwept", err)
	}

	// The writer's own path: a locked file survives the sweep.
	tmp2, lock, err := createLockedTemp(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	defer tmp2.Close()
	age(t, tmp2.Name(), time.Hour)
	if err := sweepDeadTemps(dir, "."); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp2.Name()); err != nil {
		t.Fatalf("a locked temp file was swept: %v", err)
	}
}

func TestIsTempName(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		want         bool
	}{
		{".net1-c1-eth0.tmp-123", ".", true},
		{".net1-c1-eth0.tmp-123", ".net1-c1-eth0.tmp-", true},
		{".net1-c1-eth0.tmp-123", ".net1-c2-eth0.tmp-", false},
		{".net1-c1-eth0.tmp-5.tmp-123", ".net1-c1-eth0.tmp-", false}, // interface "eth0.tmp-5"
		{".net1-c1-eth0.tmp-5.tmp-123", ".net1-c1-eth0.tmp-5.tmp-", true},
		{".net1-c1-eth0.tmp-5.tmp-123", ".", true},
		{"net1-c1-eth0.tmp-123", ".", false}, // an entry of interface "eth0.tmp-123"
		{".net1-c1-eth0.tmp-", ".", false},
		{".net1-c1-eth0.tmp-12a", ".", false},
		{"..tmp-1", ".", false},
		{".other", ".", false},
	} {
		if got := isTempName(tc.name, tc.prefix); got != tc.want {
			t.Errorf("isTempName(%q, %q) = %v, want %v", tc.name, tc.prefix, got, tc.want)
		}
	}
}

// BenchmarkCacheTemp measures what the sweep's rule costs ADD and DEL
// on a node with 110 pods (220 entries, loopback's included): the write
// of a new entry, lock included, and the sweep of one attachment's temp
// files, a listing of results/.
func BenchmarkCacheTemp(b *testing.B) {
	dir := b.TempDir()
	list := &NetworkConfigList{Name: "net1", Bytes: []byte(`{"cniVersion":"1.1.0","name":"net1","plugins":[{"type":"a"}]}`)}
	res := &Result{CNIVersion: "1.1.0", Interfaces: []*Interface{{Name: "eth0"}}}
	for i := range 220 {
		if err := writeCache(dir, list, &RuntimeConf{ContainerID: fmt.Sprintf("pod%d", i), IfName: "eth0"}, res); err != nil {
			b.Fatal(err)
		}
	}
	// The sweep first: the write's entries, created and removed, would
	// leave the directory larger than a node's.
	b.Run("sweep attachment", func(b *testing.B) {
		prefix := tempPrefix(cachePath(dir, list.Name, "pod7", "eth0"))
		for b.Loop() {
			if err := sweepDeadTemps(dir, prefix); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			rt := &RuntimeConf{ContainerID: fmt.Sprintf("new%d", i), IfName: "eth0"}
			if err := writeCache(dir, list, rt, res); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = os.Remove(cachePath(dir, list.Name, rt.ContainerID, rt.IfName))
			b.StartTimer()
		}
	})
}
