package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LogTails returns the last lines of the components' logs and of the
// podnet agents' container logs, node by node.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	names := []string{"kube-apiserver"}
	for _, node := range c.Nodes {
		names = append(names, node.procName("containerd"), node.procName("kubelet"))
	}
	for _, name := range names {
		if p := c.byName[name]; p != nil {
			fmt.Fprintf(&b, "--- %s (%s):\n%s\n", name, p.log, indent(tail(p.log, n)))
		}
	}
	for _, node := range c.Nodes {
		logs, _ := filepath.Glob(filepath.Join(node.PodLogsDir, "kube-system_podnet-*", "*", "*.log"))
		for _, l := range logs {
			fmt.Fprintf(&b, "--- %s %s:\n%s\n", node.Name, l, indent(tail(l, n)))
		}
	}
	return b.String()
}

// tail returns the last n lines of a log file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
