package manifesttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// podnetImage is a reference to podnet's image in a shipped file.
var podnetImage = regexp.MustCompile(`ghcr\.io/podnet/podnet:([^\s"']+)`)

// releaseVersion is the VERSION file at the top of the tree: the release
// the shipped manifests, the chart and `make release` name.
func releaseVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	return v
}

// TestShippedImagesAreTheRelease: no shipped manifest or value names
// :latest or another release; each names VERSION's image, the one
// `make release` builds, and the chart's version is VERSION too.
func TestShippedImagesAreTheRelease(t *testing.T) {
	v := releaseVersion(t)
	if chartVersion != v {
		t.Errorf("the chart's version %s is not VERSION's %s", chartVersion, v)
	}
	var files []string
	for _, glob := range []string{"../*.yaml", "../*/*.yaml", chartDir + "/values.yaml"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range podnetImage.FindAllStringSubmatch(string(data), -1) {
			seen++
			if m[1] != v {
				t.Errorf("%s: %s names tag %q; every shipped file names VERSION's %q", f, m[0], m[1], v)
			}
		}
		if strings.Contains(string(data), "tag: latest") {
			t.Errorf("%s: tag: latest", f)
		}
	}
	values, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(values), "\n  tag: \""+v+"\"\n") {
		t.Errorf("%s/values.yaml: image.tag is not VERSION's %q", chartDir, v)
	}
	if seen < 7 {
		t.Errorf("found %d references to podnet's image in %d files; the DaemonSets have 7", seen, len(files))
	}
}
