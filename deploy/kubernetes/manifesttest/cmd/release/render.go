package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

const image = "ghcr.io/podnet/podnet:"

// render joins the YAML files of dirs (under base) into one stream,
// podnet's image retagged from shipped to version.
func render(base string, dirs []string, shipped, version string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# podnet %s: kubectl apply -f this file (deploy/kubernetes: %s).\n", version, strings.Join(dirs, ", "))
	for _, d := range dirs {
		files, err := filepath.Glob(filepath.Join(base, d, "*.yaml"))
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(files, func(a, b string) int { return rank(a) - rank(b) })
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			text := string(data)
			if strings.Contains(text, image) && !strings.Contains(text, image+shipped) {
				return nil, fmt.Errorf("%s names podnet's image with a tag other than VERSION's %s", f, shipped)
			}
			text = strings.ReplaceAll(text, image+shipped, image+version)
			rel, _ := filepath.Rel(base, f)
			fmt.Fprintf(&b, "---\n# deploy/kubernetes/%s\n%s", filepath.ToSlash(rel), strings.TrimPrefix(text, "---\n"))
			if !strings.HasSuffix(text, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	return b.Bytes(), nil
}

// rank orders a directory's files: CRDs and the known kinds in
// kindOrder, anything else after them, by name.
func rank(path string) int {
	if i := slices.Index(kindOrder, filepath.Base(path)); i >= 0 {
		return i
	}
	return len(kindOrder)
}

// packageChart saves the chart at version, its image's tag the same.
func packageChart(dir, shipped, version, out string) (string, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	c.Metadata.Version, c.Metadata.AppVersion = version, version
	want := "\n  tag: \"" + shipped + "\"\n"
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if !bytes.Contains(f.Data, []byte(want)) {
			return "", fmt.Errorf("values.yaml: no image tag %q (VERSION's) to set", shipped)
		}
		f.Data = bytes.Replace(f.Data, []byte(want), []byte("\n  tag: \""+version+"\"\n"), 1)
	}
	// Save writes values.yaml from Raw; Values, what the chart renders
	// with, is kept the same.
	if c.Values, err = chartutil.ReadValues(valuesFile(c.Raw)); err != nil {
		return "", err
	}
	return chartutil.Save(c, out)
}

func valuesFile(raw []*chart.File) []byte {
	for _, f := range raw {
		if f.Name == chartutil.ValuesfileName {
			return f.Data
		}
	}
	return nil
}
