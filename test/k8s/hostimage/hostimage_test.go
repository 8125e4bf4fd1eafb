package hostimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseLDD(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
		wantErr   bool
	}{
		{name: "dynamic", out: "\tlinux-vdso.so.1 (0x00007ffd)\n" +
			"\tlibcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x00007f01)\n" +
			"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n" +
			"\t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n",
			want: []string{"/lib/x86_64-linux-gnu/libcurl.so.4", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}},
		{name: "unclean path", out: "\tlibz.so.1 => /usr/lib/../lib/libz.so.1 (0x1)\n", want: []string{"/usr/lib/libz.so.1"}},
		{name: "missing library", out: "\tlibgone.so.1 => not found\n", wantErr: true},
		{name: "nothing", out: "", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLDD([]byte(tc.out))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// hostProgram is a dynamically linked program every Debian machine has.
func hostProgram(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls on PATH")
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	if interp, err := Interpreter(p); err != nil || interp == "" {
		t.Skipf("%s is not a dynamic ELF program (%v)", p, err)
	}
	return p
}

// TestFiles checks that a dynamic program comes with its interpreter and
// C library, each once, with their permission bits.
func TestFiles(t *testing.T) {
	prog := hostProgram(t)
	files, err := Files(prog, prog)
	if err != nil {
		t.Fatal(err)
	}
	interp, _ := Interpreter(prog)
	seen := map[string]int{}
	var libc bool
	for _, f := range files {
		seen[f.Path]++
		if strings.HasPrefix(filepath.Base(f.Path), "libc.so") {
			libc = true
		}
		if len(f.Data) == 0 {
			t.Errorf("%s is empty", f.Path)
		}
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("%s given %d times", p, n)
		}
	}
	if seen[prog] != 1 || seen[interp] != 1 || !libc {
		t.Fatalf("files %v: want %s, its interpreter %s and libc", seen, prog, interp)
	}
}

// TestFilesRun writes the files of a dynamic program into an empty
// directory and runs it chrooted there: nothing of the machine's is
// left to find. Needs root (chroot).
func TestFilesRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	prog := hostProgram(t)
	files, err := Files(prog)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, f := range files {
		dst := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(prog, "/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a root of its files alone: %v\n%s", prog, err, out)
	}
	// The root holds the top directories of the files written, and
	// nothing else.
	for _, want := range []string{strings.Split(strings.TrimPrefix(prog, "/"), "/")[0]} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("ls / in the chroot printed %q, want %q in it", out, want)
		}
	}
}

func TestFilesRejectsRelative(t *testing.T) {
	if _, err := Files("ls"); err == nil {
		t.Fatal("a relative program path was accepted")
	}
}

// TestExtracted takes a program from a directory standing for an
// unpacked package: the program comes from there, placed at its path in
// the image, its interpreter from the machine.
func TestExtracted(t *testing.T) {
	prog := hostProgram(t)
	root := t.TempDir()
	data, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "opt/pkg/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "opt/pkg/bin/prog"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := Extracted(root, "/opt/pkg/bin/prog")
	if err != nil {
		t.Fatal(err)
	}
	interp, _ := Interpreter(prog)
	if len(files) < 3 || files[0].Path != "/opt/pkg/bin/prog" || len(files[0].Data) != len(data) {
		t.Fatalf("files %v: want the program first, at its image path", files)
	}
	var found bool
	for _, f := range files {
		found = found || f.Path == interp
	}
	if !found {
		t.Fatalf("no interpreter %s among the files", interp)
	}
}

// TestLoaded: a dlopen'd object comes with what it links, and a relative
// path is refused.
func TestLoaded(t *testing.T) {
	objs, _ := filepath.Glob("/usr/lib/*-linux-gnu/xtables/libxt_comment.so")
	if len(objs) == 0 {
		t.Skip("no iptables extensions on this machine")
	}
	files, err := Loaded(objs[0])
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if !slices.Contains(paths, objs[0]) || !slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "libxtables.so") }) {
		t.Fatalf("Loaded(%s) = %q, want it and libxtables", objs[0], paths)
	}
	if _, err := Loaded("libxt_comment.so"); err == nil {
		t.Fatal("a relative path was accepted")
	}
}
