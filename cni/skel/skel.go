package skel

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netns"
	"golang.org/x/sys/unix"
)

// Plugin is a CNI plugin: a handler per verb, and what it supports.
// A panic in a handler becomes a code-100 error; a panic in a goroutine
// a handler started cannot be caught and crashes the plugin.
type Plugin struct {
	// Add configures the container and returns the result. skel converts
	// it to the configuration's cniVersion before printing it.
	Add func(*CmdArgs) (*cni.Result, error)
	// Del undoes Add. It must succeed when there is nothing to undo,
	// including when the namespace is gone (CmdArgs.NetnsGone).
	Del func(*CmdArgs) error
	// Check verifies that the container is as Add left it.
	Check func(*CmdArgs) error
	// Status reports whether the plugin can serve ADD. Nil means it
	// always can.
	Status func(*CmdArgs) error
	// GC removes what belongs to no attachment in
	// NetConf.ValidAttachments. Nil means there is nothing to collect.
	GC func(*CmdArgs) error

	// Versions are the specification versions the plugin accepts, oldest
	// first. Nil means cni.SupportedVersions.
	Versions []string
	// About describes the plugin to a human who runs it without
	// CNI_COMMAND, e.g. "podnet loopback plugin v1.2.3".
	About string
}

// CmdArgs is everything a handler gets from the runtime.
type CmdArgs struct {
	Command     cni.Verb
	ContainerID string
	Netns       string
	// NetnsGone is set for DEL when CNI_NETNS was given but no longer is
	// a network namespace: the handler has nothing to undo inside it.
	// It is never set for ADD or CHECK, which fail instead.
	NetnsGone bool
	IfName    string
	Args      string      // CNI_ARGS as given
	ArgsPairs [][2]string // CNI_ARGS parsed, in order
	Path      []string    // CNI_PATH split into directories
	StdinData []byte      // the configuration exactly as received
	NetConf   *NetConf
	// Stderr is where a handler logs; stdout is not the handler's.
	Stderr io.Writer
}

// Main runs the plugin as a process: it reads os.Stdin and the
// environment, writes the result or error, and exits. It never returns.
//
// Before anything runs, file descriptor 1 is pointed at stderr and the
// real stdout kept aside, so a stray print in a handler or a library
// cannot corrupt the document the runtime parses.
func (p *Plugin) Main() {
	start := time.Now()
	code := p.Run(os.Getenv, os.Stdin, guardStdout(), os.Stderr)
	if t := os.Getenv("PODNET_PLUGIN_TIMING"); t != "" {
		reportTiming(t, start)
	}
	os.Exit(code)
}

// reportTiming is for finding where a pod's set-up time goes: the time
// in main (the runtime sees this plus process start and exit) and the
// process's CPU and minor page faults so far (start included). To
// stderr, or appended to the file when the setting is an absolute path
// (a runtime keeps a plugin's stderr only when it fails).
func reportTiming(setting string, start time.Time) {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	line := fmt.Sprintf("%s %s: %.3f ms in main, cpu user %.3f ms sys %.3f ms, %d minor faults\n",
		filepath.Base(os.Args[0]), os.Getenv("CNI_COMMAND"), float64(time.Since(start))/1e6,
		float64(unix.TimevalToNsec(ru.Utime))/1e6, float64(unix.TimevalToNsec(ru.Stime))/1e6, ru.Minflt)
	if !filepath.IsAbs(setting) {
		fmt.Fprint(os.Stderr, line)
		return
	}
	f, err := os.OpenFile(setting, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "PODNET_PLUGIN_TIMING: %v\n", err)
		return
	}
	_, _ = f.WriteString(line) // one write: lines of plugins running at once stay whole
	_ = f.Close()
}

func guardStdout() io.Writer {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return os.Stdout
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		unix.Close(fd)
		return os.Stdout
	}
	return os.NewFile(uintptr(fd), "/dev/stdout")
}

// Run is the whole plugin invocation with its inputs and outputs made
// explicit, for tests and for Main. It returns the exit status: 0, or 1
// after printing an error document on stdout.
func (p *Plugin) Run(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return p.run(getenv, stdin, stdout, stderr, checkNetNS)
}

// nsChecker validates CNI_NETNS; tests without root substitute it.
type nsChecker func(cmd cni.Verb, path string) (gone bool, err error)

func (p *Plugin) run(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, checkNS nsChecker) int {
	inv := &invocation{p: p, getenv: getenv, stdin: stdin, stderr: stderr, checkNS: checkNS}
	out, err := inv.dispatch()
	if err != nil {
		e := *cni.AsError(err, cni.CodeInternal) // a copy: the handler may reuse its error
		if e.CNIVersion == "" {
			e.CNIVersion = inv.errorVersion()
		}
		if _, werr := stdout.Write(append(e.JSON(), '\n')); werr != nil {
			fmt.Fprintf(stderr, "cannot write error to stdout: %v (error: %v)\n", werr, &e)
		}
		return 1
	}
	if out != nil {
		if _, err := stdout.Write(append(out, '\n')); err != nil {
			fmt.Fprintf(stderr, "cannot write output to stdout: %v\n", err)
			return 1
		}
	}
	return 0
}

func (p *Plugin) versions() []string {
	if p.Versions == nil {
		return cni.SupportedVersions
	}
	return p.Versions
}

// newest is the newest version the plugin speaks.
func (p *Plugin) newest() string {
	vs := p.versions()
	best := ""
	for _, v := range vs {
		if best == "" || cni.AtLeast(v, best) {
			best = v
		}
	}
	if best == "" {
		return cni.CurrentVersion
	}
	return best
}

// invocation is one run of the plugin.
type invocation struct {
	p       *Plugin
	getenv  func(string) string
	stdin   io.Reader
	stderr  io.Writer
	checkNS nsChecker
	conf    *NetConf // once decoded: errors are written in its version
}

func (inv *invocation) errorVersion() string {
	if inv.conf != nil && inv.conf.CNIVersion != "" && slices.Contains(inv.p.versions(), inv.conf.CNIVersion) {
		return inv.conf.CNIVersion
	}
	return inv.p.newest()
}

func (inv *invocation) dispatch() ([]byte, error) {
	cmd := cni.Verb(inv.getenv("CNI_COMMAND"))
	if cmd == "" && inv.p.About != "" {
		fmt.Fprintln(inv.stderr, inv.p.About)
		fmt.Fprintf(inv.stderr, "CNI protocol versions supported: %s\n", strings.Join(inv.p.versions(), ", "))
	}
	args, err := parseEnv(cmd, inv.getenv)
	if err != nil {
		return nil, err
	}
	args.Stderr = inv.stderr
	if args.StdinData, err = io.ReadAll(inv.stdin); err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "cannot read the configuration from stdin: %v", err)
	}
	if cmd == cni.VerbVersion {
		return inv.version(args.StdinData)
	}
	if inv.conf, err = decodeConf(args.StdinData); err != nil {
		return nil, err
	}
	args.NetConf = inv.conf
	if err := inv.checkVersion(cmd, inv.conf.CNIVersion); err != nil {
		return nil, err
	}
	if err := inv.parsePrevResult(cmd); err != nil {
		return nil, err
	}
	// Before the handler, not after as upstream skel does: a handler run
	// against the wrong namespace may already have broken the host.
	if args.Netns != "" && cmd.PerAttachment() {
		if args.NetnsGone, err = inv.checkNS(cmd, args.Netns); err != nil {
			return nil, err
		}
	}
	return inv.call(cmd, args)
}

// version answers VERSION. The runtime may send {"cniVersion": X}; it is
// checked for form only, since the answer does not depend on it.
func (inv *invocation) version(stdin []byte) ([]byte, error) {
	if len(strings.TrimSpace(string(stdin))) > 0 {
		v, err := decodeVersionRequest(stdin)
		if err != nil {
			return nil, err
		}
		if v != "" {
			if _, err := cni.CompareVersions(v, v); err != nil {
				return nil, cni.Errorf(cni.CodeIncompatibleVersion, "VERSION: %v", err)
			}
		}
	}
	return jsonBytes(&cni.VersionInfo{CNIVersion: inv.p.newest(), SupportedVersions: inv.p.versions()})
}

// checkVersion refuses a configuration version the plugin does not speak
// and a verb the configuration's version does not have.
func (inv *invocation) checkVersion(cmd cni.Verb, v string) error {
	if _, err := cni.CompareVersions(v, v); err != nil {
		return cni.Errorf(cni.CodeIncompatibleVersion, "config cniVersion: %v", err)
	}
	if !slices.Contains(inv.p.versions(), v) {
		return cni.Errorf(cni.CodeIncompatibleVersion, "config cniVersion %s is not supported by the plugin (it supports %s)", v, strings.Join(inv.p.versions(), ", "))
	}
	since := cmd.Since()
	if since != "" && !cni.AtLeast(v, since) {
		return cni.Errorf(cni.CodeIncompatibleVersion, "config cniVersion %s does not have %s (it exists from %s on)", v, cmd, since)
	}
	return nil
}

// call runs the handler for cmd. A panic becomes a code-100 error, with
// its stack on stderr, rather than a crash with nothing on stdout.
func (inv *invocation) call(cmd cni.Verb, args *CmdArgs) (out []byte, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		stack := debug.Stack()
		if pe, ok := p.(*netns.PanicError); ok {
			p, stack = pe.Value, pe.Stack
		}
		fmt.Fprintf(inv.stderr, "panic in %s handler: %v\n%s", cmd, p, stack)
		out, err = nil, cni.Errorf(cni.CodeInternal, "plugin panicked during %s: %v", cmd, p)
	}()
	p := inv.p
	switch cmd {
	case cni.VerbAdd:
		if p.Add == nil {
			return nil, cni.Errorf(cni.CodeInternal, "plugin does not implement ADD")
		}
		res, err := p.Add(args)
		if err != nil {
			return nil, err
		}
		return inv.resultBytes(res)
	case cni.VerbDel:
		return nil, callOrFail(p.Del, args)
	case cni.VerbCheck:
		return nil, callOrFail(p.Check, args)
	case cni.VerbStatus:
		return nil, callOrOK(p.Status, args)
	case cni.VerbGC:
		return nil, callOrOK(p.GC, args)
	}
	// parseEnv lets only known commands through.
	return nil, cni.Errorf(cni.CodeInternal, "unhandled command %q", cmd)
}

func callOrFail(fn func(*CmdArgs) error, args *CmdArgs) error {
	if fn == nil {
		return cni.Errorf(cni.CodeInternal, "plugin does not implement %s", args.Command)
	}
	return fn(args)
}

func callOrOK(fn func(*CmdArgs) error, args *CmdArgs) error {
	if fn == nil {
		return nil
	}
	return fn(args)
}

// resultBytes writes the handler's result in the configuration's version.
func (inv *invocation) resultBytes(res *cni.Result) ([]byte, error) {
	if res == nil {
		return nil, cni.Errorf(cni.CodeInternal, "plugin returned no result for ADD")
	}
	conv, err := res.ConvertTo(inv.conf.CNIVersion)
	if err != nil {
		return nil, cni.Errorf(cni.CodeInternal, "cannot convert the result to %s: %v", inv.conf.CNIVersion, err)
	}
	if err := conv.Validate(); err != nil {
		return nil, cni.Errorf(cni.CodeInternal, "plugin produced an invalid result: %v", err)
	}
	return conv.Bytes(), nil
}
