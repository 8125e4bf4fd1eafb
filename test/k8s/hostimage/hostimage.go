package hostimage

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/podnet/podnet/test/k8s/ociimage"
)

// Files returns the image files that make the given host programs run:
// each program at its own path, and for a dynamically linked one its ELF
// interpreter and every shared library ldd resolves, at the paths the
// loader opens them from. A file several programs share comes once.
// Symbolic links are followed: a program or library is copied with the
// content and permission bits of what its path names.
func Files(programs ...string) ([]ociimage.File, error) {
	paths := map[string]bool{}
	for _, p := range programs {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("program %q: want an absolute path", p)
		}
		paths[filepath.Clean(p)] = true
		deps, err := Deps(p)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			paths[d] = true
		}
	}
	return filesAt(paths)
}

// filesAt reads the machine's files at paths, in path order, each at the
// same path in the image.
func filesAt(paths map[string]bool) ([]ociimage.File, error) {
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	files := make([]ociimage.File, 0, len(sorted))
	for _, p := range sorted {
		f, err := readFile(p, p)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// readFile is the machine's file src as the image's file at path, with
// src's content and permission bits (a link's target's).
func readFile(src, path string) (ociimage.File, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return ociimage.File{}, err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return ociimage.File{}, err
	}
	return ociimage.File{Path: path, Mode: fi.Mode().Perm(), Data: data}, nil
}

// Extracted returns the image files of a program that lies under root
// (a package unpacked there with dpkg-deb -x, not installed) and runs at
// path in the image: the program read from root, its interpreter and
// libraries from the machine, as for Files.
func Extracted(root, path string) ([]ociimage.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("program %q: want an absolute path", path)
	}
	src := filepath.Join(root, path)
	prog, err := readFile(src, filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	deps, err := Deps(src)
	if err != nil {
		return nil, err
	}
	files := []ociimage.File{prog}
	for _, d := range deps {
		f, err := readFile(d, d)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// Deps returns what a program needs besides itself to start: nothing for
// a static program; for a dynamic one its interpreter (PT_INTERP) and the
// shared libraries ldd lists, by absolute path.
func Deps(program string) ([]string, error) {
	interp, err := Interpreter(program)
	if err != nil {
		return nil, err
	}
	if interp == "" {
		return nil, nil
	}
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("ldd %s: %w: %s", program, err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	libs, err := parseLDD(out)
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	deps := []string{interp}
	for _, l := range libs {
		if l != interp {
			deps = append(deps, l)
		}
	}
	return deps, nil
}

// Interpreter returns the ELF interpreter a program names, "" for a
// static one.
func Interpreter(program string) (string, error) {
	f, err := elf.Open(program)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return "", fmt.Errorf("%s: PT_INTERP: %w", program, err)
		}
		return string(bytes.TrimRight(data, "\x00")), nil
	}
	return "", nil
}

// parseLDD returns the absolute paths in ldd's output, one library a
// line: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", or the
// loader's "/lib64/ld-linux-x86-64.so.2 (0x...)". The vDSO has no file
// and is left out; a library the loader cannot find is an error.
func parseLDD(out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.Contains(line, "=> not found") {
			return nil, fmt.Errorf("library not found: %s", line)
		}
		field := line
		if _, after, ok := strings.Cut(line, "=>"); ok {
			field = strings.TrimSpace(after)
		}
		p, _, _ := strings.Cut(field, " ")
		if filepath.IsAbs(p) {
			libs = append(libs, filepath.Clean(p))
		}
	}
	return libs, sc.Err()
}

// Loaded returns the image files of shared objects a program opens with
// dlopen rather than links (iptables' extensions under
// /usr/lib/<triplet>/xtables), each at its own path with the libraries
// ldd resolves for it: ldd run on the program does not see them. A file
// several objects share comes once.
func Loaded(objects ...string) ([]ociimage.File, error) {
	paths := map[string]bool{}
	for _, o := range objects {
		if !filepath.IsAbs(o) {
			return nil, fmt.Errorf("shared object %q: want an absolute path", o)
		}
		paths[filepath.Clean(o)] = true
		out, err := exec.Command("ldd", o).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", o, err)
		}
		libs, err := parseLDD(out)
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", o, err)
		}
		for _, l := range libs {
			paths[l] = true
		}
	}
	return filesAt(paths)
}
