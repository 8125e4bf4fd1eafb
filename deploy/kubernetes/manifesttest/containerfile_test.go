package manifesttest

import (
	"encoding/json"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/install"
)

// containerfile is deploy/Containerfile, relative to this package.
const containerfile = "../../Containerfile"

// instructions returns the Containerfile's instructions, continuation
// lines joined and comments dropped.
func instructions(data string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(data, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur += body + " "
			continue
		}
		if cur += trimmed; strings.TrimSpace(cur) != "" {
			out = append(out, strings.TrimSpace(cur))
		}
		cur = ""
	}
	return out
}

// builtInto maps each package a `go build -o DIR/ PKG...` of the
// Containerfile builds to DIR.
func builtInto(instrs []string) map[string]string {
	out := map[string]string{}
	for _, in := range instrs {
		if !strings.HasPrefix(in, "RUN ") {
			continue
		}
		for _, cmd := range strings.Split(in, "&&") {
			f := strings.Fields(cmd)
			i := slices.Index(f, "build")
			if i < 1 || f[i-1] != "go" {
				continue
			}
			dir := ""
			for j := i + 1; j < len(f); j++ {
				switch {
				case f[j] == "-o" && j+1 < len(f):
					dir = path.Clean(f[j+1])
					j++
				case strings.HasPrefix(f[j], "./"):
					out[f[j]] = dir
				}
			}
		}
	}
	return out
}

// TestContainerfile checks that the image has what every variant's
// DaemonSet runs: its entrypoint is the containers' command, podnet is
// built where the command finds it and the plugins where --src-dir says
// they are.
func TestContainerfile(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { checkContainerfile(t, loadPodFrom(t, v.dir)) })
	}
}

func checkContainerfile(t *testing.T, p *pod) {
	data, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	instrs := instructions(string(data))
	var entrypoint []string
	for _, in := range instrs {
		if rest, ok := strings.CutPrefix(in, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		}
	}
	if len(entrypoint) == 0 {
		t.Fatal("no ENTRYPOINT")
	}
	for _, c := range [][]string{p.init.Command, p.agent.Command} {
		if len(c) > 0 && !slices.Equal(c, entrypoint) {
			t.Errorf("DaemonSet command %q, image ENTRYPOINT %q", c, entrypoint)
		}
	}

	built := builtInto(instrs)
	if dir, ok := built["./cmd/podnet"]; !ok || dir != path.Dir(entrypoint[0]) {
		t.Errorf("./cmd/podnet built into %q, want %s (the ENTRYPOINT)", dir, path.Dir(entrypoint[0]))
	}
	src, ok := flagValue(argv(p.init), "src-dir")
	if !ok {
		t.Fatal("install-cni: no --src-dir")
	}
	for _, name := range install.PluginNames {
		if dir := built["./plugins/"+name]; dir != path.Clean(src) {
			t.Errorf("./plugins/%s built into %q, want --src-dir %s", name, dir, src)
		}
	}
	if path.Clean(src) == path.Dir(entrypoint[0]) {
		t.Errorf("--src-dir %s holds the podnet CLI, which would be installed as the podnet plugin", src)
	}
}
