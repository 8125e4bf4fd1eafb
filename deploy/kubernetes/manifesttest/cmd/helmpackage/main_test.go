package main

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPackageChart: the archive holds the chart, and Helm loads it back
// with the same metadata, templates, files and schema.
func TestPackageChart(t *testing.T) {
	const dir = "../../../../helm/podnet"
	path, err := packageChart(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "podnet-0.1.0.tgz" {
		t.Errorf("archive %s, want podnet-0.1.0.tgz", path)
	}
	got, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Version != want.Metadata.Version || len(got.Templates) != len(want.Templates) ||
		len(got.Files) != len(want.Files) || string(got.Schema) != string(want.Schema) {
		t.Errorf("the archive's chart: version %s, %d templates, %d files, schema %d bytes; the directory's: %s, %d, %d, %d",
			got.Metadata.Version, len(got.Templates), len(got.Files), len(got.Schema),
			want.Metadata.Version, len(want.Templates), len(want.Files), len(want.Schema))
	}
}
