package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testplugin/record"
	"golang.org/x/sys/unix"
)

const (
	envVersions = "PODNET_TESTPLUGIN_VERSIONS"
	envRecord   = "PODNET_TESTPLUGIN_RECORD"
	envChild    = "PODNET_TESTPLUGIN_CHILD" // set in the spawned child: how long to sleep
	// envChildIgnoreTerm is set in the spawned child of a plugin
	// configured with ignoreTerm.
	envChildIgnoreTerm = "PODNET_TESTPLUGIN_CHILD_IGNORE_TERM"
)

func main() {
	if d := os.Getenv(envChild); d != "" {
		if os.Getenv(envChildIgnoreTerm) != "" {
			signal.Ignore(syscall.SIGTERM)
			// Tell the plugin the signal is ignored now (fd 3, see
			// spawnChild): until then a SIGTERM would still end us.
			ready := os.NewFile(3, "ready")
			ready.Write([]byte{1})
			ready.Close()
		}
		sleepFor, _ := time.ParseDuration(d)
		time.Sleep(sleepFor)
		os.Exit(0)
	}
	os.Exit(run())
}

func run() int {
	cmd := cni.Verb(os.Getenv("CNI_COMMAND"))
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fail(&cni.Error{Code: cni.CodeIOFailure, Msg: "read stdin: " + err.Error()})
	}
	conf, confErr := parseConfig(stdin)

	dir := conf.Record
	if dir == "" {
		dir = os.Getenv(envRecord)
	}
	if dir != "" {
		if err := writeRecord(dir, cmd, stdin); err != nil {
			return fail(&cni.Error{Code: cni.CodeIOFailure, Msg: "record: " + err.Error()})
		}
	}
	versions := supportedVersions()
	if cmd == cni.VerbVersion {
		return printJSON(&cni.VersionInfo{CNIVersion: newest(versions), SupportedVersions: versions})
	}
	if confErr != nil {
		return fail(confErr)
	}
	if code, exit := misbehave(conf, cmd, dir); exit {
		return code
	}
	if !slices.Contains(versions, conf.CNIVersion) {
		return fail(cni.Errorf(cni.CodeIncompatibleVersion, "testplugin: cniVersion %q not in %s", conf.CNIVersion, strings.Join(versions, ",")))
	}
	if f, ok := conf.Fail[cmd]; ok {
		return fail(&cni.Error{Code: f.Code, Msg: f.Msg, Details: f.Details})
	}
	if conf.Garbage.has(cmd) {
		fmt.Println("this is not JSON {")
		return 0
	}
	return answer(conf, cmd)
}

// misbehave does what the configuration says the plugin does before it
// answers: ignore SIGTERM, leave a child behind, take its time, or crash
// (exit is then true, with the exit status).
func misbehave(conf *config, cmd cni.Verb, dir string) (code int, exit bool) {
	if conf.IgnoreTerm {
		// Before the child starts, so that no SIGTERM sent to the group
		// can find the plugin still unprotected.
		signal.Ignore(syscall.SIGTERM)
	}
	if conf.SpawnChild {
		if err := spawnChild(conf, dir); err != nil {
			return fail(&cni.Error{Code: cni.CodeInternal, Msg: "spawn child: " + err.Error()}), true
		}
	}
	if d := conf.sleepFor(cmd); d > 0 {
		time.Sleep(d)
	}
	if conf.Crash.has(cmd) {
		fmt.Fprintf(os.Stderr, "testplugin: crashing on %s as configured\n", cmd)
		return 2, true
	}
	return 0, false
}

// answer is the plugin's answer to a verb it serves.
func answer(conf *config, cmd cni.Verb) int {
	switch cmd {
	case cni.VerbAdd:
		if conf.Null {
			fmt.Println("null")
			return 0
		}
		if conf.Result != nil {
			os.Stdout.Write(append(conf.Result, '\n'))
			return 0
		}
		r, err := defaultResult(conf)
		if err != nil {
			return fail(cni.AsError(err, cni.CodeInternal))
		}
		return printJSON(r)
	case cni.VerbDel, cni.VerbCheck, cni.VerbStatus, cni.VerbGC:
		return 0
	}
	return fail(cni.Errorf(cni.CodeInvalidEnvironment, "testplugin: unknown CNI_COMMAND %q", cmd))
}

func supportedVersions() []string {
	if s := os.Getenv(envVersions); s != "" {
		return strings.Split(s, ",")
	}
	return cni.SupportedVersions
}

func newest(versions []string) string {
	best := ""
	for _, v := range versions {
		if best == "" || cni.AtLeast(v, best) {
			best = v
		}
	}
	return best
}

func writeRecord(dir string, cmd cni.Verb, stdin []byte) error {
	r := &record.Record{Command: string(cmd), Env: map[string]string{}, Stdin: string(stdin), PID: os.Getpid(), PGID: unix.Getpgrp()}
	r.NetNS, _ = os.Readlink("/proc/self/ns/net")
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "CNI_") {
			r.Env[k] = v
		}
	}
	return record.Write(dir, r)
}

func fail(e *cni.Error) int {
	os.Stdout.Write(append(e.JSON(), '\n'))
	return 1
}

func printJSON(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return fail(cni.Errorf(cni.CodeInternal, "marshal: %v", err))
	}
	os.Stdout.Write(append(b, '\n'))
	return 0
}
