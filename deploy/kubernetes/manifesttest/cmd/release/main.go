// Command release writes what `make release VERSION=x.y.z` ships besides
// the image: one manifest per deployment (podnet-VERSION.yaml, the
// default; podnet-blocks-VERSION.yaml; podnet-etcd-VERSION.yaml; and
// podnet-uninstall-VERSION.yaml), each the shipped directory's files in
// the order kubectl needs them, the CRDs the variant uses first, with
// podnet's image named by the release's tag; and the Helm chart's archive
// at that version. The shipped files name the VERSION file's release;
// nothing else in them changes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// variants: the rendered file's name (before -VERSION.yaml) and its
// sources, relative to deploy/kubernetes, in apply order.
var variants = []struct {
	name    string
	sources []string
}{
	{"podnet", []string{"clusternetworkpolicy", "."}},
	{"podnet-blocks", []string{"crds", "clusternetworkpolicy", "blocks"}},
	{"podnet-etcd", []string{"etcd"}},
	{"podnet-uninstall", []string{"uninstall"}},
}

// kindOrder puts a directory's files in the order their objects are
// needed: accounts and roles before the DaemonSet that uses them.
var kindOrder = []string{"serviceaccount.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml"}

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

func main() {
	root := flag.String("root", "../../../..", "the top of podnet's tree")
	version := flag.String("version", "", "the release, x.y.z")
	out := flag.String("out", "dist", "the directory the files go in")
	flag.Parse()
	if err := run(*root, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(root, version, out string) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("-version %q: want x.y.z (a semantic version)", version)
	}
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return err
	}
	shipped := strings.TrimSpace(string(data))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, v := range variants {
		doc, err := render(filepath.Join(root, "deploy/kubernetes"), v.sources, shipped, version)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		path := filepath.Join(out, fmt.Sprintf("%s-%s.yaml", v.name, version))
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			return err
		}
		fmt.Println(path)
	}
	path, err := packageChart(filepath.Join(root, "deploy/helm/podnet"), shipped, version, out)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	fmt.Println(path)
	return nil
}
