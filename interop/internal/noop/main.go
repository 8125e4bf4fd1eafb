// Command noop is the trivial CNI plugin of the interop tests and
// benchmarks: it touches no namespace, so what a chain of it costs is the
// runtime's own work (config building, exec, result parsing, cache).
//
// ADD prints prevResult when there is one and otherwise a fixed result in
// the configuration's version; every other verb succeeds without output,
// except VERSION. Tests steer it through its configuration:
//
//   - "record": a file path; one JSON line is appended per call (command,
//     CNI_* environment, stdin), so a test sees exactly what a runtime sent;
//   - "addOutput": a string ADD prints verbatim instead of a result, to see
//     how a runtime takes odd plugin output;
//   - "fail": {"verb", "code", "msg", "details"}: print that error and exit
//     1 on that verb.
//
// It uses only the standard library, so its cost is the same under every
// runtime.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

var supported = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

type conf struct {
	CNIVersion string          `json:"cniVersion"`
	PrevResult json.RawMessage `json:"prevResult"`
	Record     string          `json:"record"`
	AddOutput  *string         `json:"addOutput"`
	Fail       *struct {
		Verb    string `json:"verb"`
		Code    int    `json:"code"`
		Msg     string `json:"msg"`
		Details string `json:"details"`
	} `json:"fail"`
}

func main() {
	if err := run(); err != nil {
		doc, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "code": 999, "msg": err.Error()})
		os.Stdout.Write(doc)
		os.Exit(1)
	}
}

func run() error {
	cmd := os.Getenv("CNI_COMMAND")
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	if cmd == "VERSION" {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.1.0", "supportedVersions": supported})
	}
	var c conf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if c.Record != "" {
		if err := record(c.Record, cmd, stdin); err != nil {
			return err
		}
	}
	if f := c.Fail; f != nil && f.Verb == cmd {
		doc, _ := json.Marshal(map[string]any{"cniVersion": c.CNIVersion, "code": f.Code, "msg": f.Msg, "details": f.Details})
		os.Stdout.Write(doc)
		os.Exit(1)
	}
	if cmd != "ADD" {
		return nil
	}
	if c.AddOutput != nil {
		_, err := os.Stdout.WriteString(*c.AddOutput)
		return err
	}
	if len(c.PrevResult) > 0 && !bytes.Equal(c.PrevResult, []byte("null")) {
		_, err := os.Stdout.Write(c.PrevResult)
		return err
	}
	ip := map[string]any{"address": "10.99.255.2/24", "gateway": "10.99.255.1", "interface": 0}
	if strings.HasPrefix(c.CNIVersion, "0.") {
		ip["version"] = "4"
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"cniVersion": c.CNIVersion,
		"interfaces": []any{map[string]any{"name": os.Getenv("CNI_IFNAME"), "sandbox": os.Getenv("CNI_NETNS")}},
		"ips":        []any{ip},
	})
}

func record(path, cmd string, stdin []byte) error {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "CNI_") {
			env[k] = v
		}
	}
	line, err := json.Marshal(map[string]any{"command": cmd, "env": env, "stdin": json.RawMessage(stdin)})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
