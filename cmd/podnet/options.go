package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

// globalOptions are the flags every command shares. Their defaults come
// from cnitool's environment, so scripts written for cnitool work as they
// are.
type globalOptions struct {
	confDir  string
	binDirs  []string
	cacheDir string
	stateDir string
	timeout  time.Duration
	logLevel string
	loopback string
}

func (o *globalOptions) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.confDir, "conf-dir", envOr("NETCONFPATH", netplugin.DefaultConfDir), "directory of network configs ($NETCONFPATH)")
	f.StringArrayVar(&o.binDirs, "bin-dir", splitPath(envOr("CNI_PATH", netplugin.DefaultBinDir)), "plugin directory, repeatable ($CNI_PATH)")
	f.StringVar(&o.cacheDir, "cache-dir", cni.DefaultCacheDir, "result cache directory")
	f.StringVar(&o.stateDir, "state-dir", sandbox.DefaultStateDir, "where podnet keeps the records of the sandboxes it creates")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "deadline for the whole operation")
	f.StringVar(&o.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	f.StringVar(&o.loopback, "loopback", string(netplugin.LoopbackInProcess), "how a pod's lo comes up: in-process, or plugin (exec the loopback plugin, as kubelet does)")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if _, err := netplugin.ParseLoopbackMode(o.loopback); err != nil {
			return fmt.Errorf("--loopback: %w", err)
		}
		return o.setupLogging()
	}
}

func (o *globalOptions) setupLogging() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	// client-go logs through klog (its reflectors' watch errors, leader
	// election, throttling): through slog too, so that the agent's log is
	// one format at one level, with the source named. klog's logger is
	// global and set once (commands may run concurrently in tests); it
	// hands each record to whatever slog's default is then.
	klogOnce.Do(func() {
		klog.SetSlogLogger(slog.New(defaultHandler{}).With("logger", "client-go"))
	})
	return nil
}

func (o *globalOptions) runtime() *cni.Runtime {
	return cni.NewRuntime(o.binDirs, cni.WithCacheDir(o.cacheDir))
}

func (o *globalOptions) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), o.timeout)
}

// network loads the named network from the conf dir. When it is missing,
// the error says which files were broken, since that is the usual reason.
func (o *globalOptions) network(name string) (*cni.NetworkConfigList, error) {
	dc, err := cni.LoadDir(o.confDir)
	if err != nil {
		return nil, err
	}
	if n := dc.Network(name); n != nil {
		return n, nil
	}
	msg := "no network " + quote(name) + " in " + o.confDir
	if len(dc.Broken) > 0 {
		var reasons []string
		for _, b := range dc.Broken {
			reasons = append(reasons, b.Error())
		}
		msg += " (broken files: " + strings.Join(reasons, "; ") + ")"
	}
	return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "%s", msg)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func splitPath(s string) []string {
	var out []string
	for _, p := range filepath.SplitList(s) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// netnsPath turns a namespace name into its path under /run/netns; a path
// is returned as it is.
func netnsPath(arg string) string {
	if strings.ContainsRune(arg, '/') {
		return arg
	}
	return filepath.Join("/run/netns", arg)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var klogOnce sync.Once

// defaultHandler hands each record, with its attributes, to slog's
// default handler at the time of the call.
type defaultHandler struct{ attrs []slog.Attr }

func (defaultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return slog.Default().Handler().Enabled(ctx, l)
}

func (h defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.attrs...)
	return slog.Default().Handler().Handle(ctx, r)
}

func (h defaultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return defaultHandler{attrs: append(slices.Clip(h.attrs), as...)}
}

// WithGroup keeps the attributes flat: klog's records have no groups
// worth keeping apart.
func (h defaultHandler) WithGroup(string) slog.Handler { return h }
