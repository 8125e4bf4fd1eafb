package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podnet/podnet/test/k8s/ociimage"
)

// plugins are the CNI plugins the image carries, as in deploy/Containerfile.
var plugins = []string{"podnet", "podnet-ipam", "podnet-portmap", "loopback"}

func main() {
	bin := flag.String("bin", "bin", "directory with the podnet CLI, and the plugins in its cni/")
	out := flag.String("o", "", "archive to write")
	name := flag.String("name", "podnet.test/podnet:dev", "image reference")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: podnet-image -bin DIR -o FILE.tar [-name REF]")
		os.Exit(2)
	}
	if err := run(*bin, *out, *name); err != nil {
		fmt.Fprintln(os.Stderr, "podnet-image:", err)
		os.Exit(1)
	}
}

func run(bin, out, name string) error {
	img := ociimage.Image{
		Name:       name,
		Entrypoint: []string{"/opt/podnet/bin/podnet"},
		Dirs:       []string{"/tmp"},
	}
	add := func(src, dst string) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		img.Files = append(img.Files, ociimage.File{Path: dst, Mode: 0o755, Data: data})
		return nil
	}
	if err := add(filepath.Join(bin, "podnet"), "/opt/podnet/bin/podnet"); err != nil {
		return err
	}
	for _, p := range plugins {
		if err := add(filepath.Join(bin, "cni", p), "/opt/podnet/cni/"+p); err != nil {
			return err
		}
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := ociimage.Write(w, img); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Printf("wrote %s (%s)\n", out, name)
	return nil
}
