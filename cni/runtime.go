package cni

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Runtime executes network configuration lists: the runtime side of the
// specification. It is safe for concurrent use; it holds no per-call state
// and locks nothing. Callers serialise operations on one attachment.
type Runtime struct {
	path        []string
	cacheDir    string
	exec        Exec
	rollback    bool
	execTimeout time.Duration
}

// DefaultRollbackTimeout bounds the DEL that undoes a failed ADD when the
// caller set no deadline of its own.
const DefaultRollbackTimeout = 30 * time.Second

// Option configures a Runtime.
type Option func(*Runtime)

// WithCacheDir sets the result cache directory (default /var/lib/cni).
func WithCacheDir(dir string) Option { return func(r *Runtime) { r.cacheDir = dir } }

// WithExec replaces the plugin executor; for tests of chaining logic.
func WithExec(e Exec) Option { return func(r *Runtime) { r.exec = e } }

// WithRollback sets whether a failed ADD is undone by DEL of the plugins
// that ran (default true).
func WithRollback(on bool) Option { return func(r *Runtime) { r.rollback = on } }

// WithPluginTimeout bounds every single plugin execution, in addition to
// the caller's context (default: only the context).
func WithPluginTimeout(d time.Duration) Option { return func(r *Runtime) { r.execTimeout = d } }

// NewRuntime returns a Runtime that looks for plugins in path.
func NewRuntime(path []string, opts ...Option) *Runtime {
	r := &Runtime{path: path, cacheDir: DefaultCacheDir, exec: &RawExec{}, rollback: true}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Path returns the plugin directories.
func (r *Runtime) Path() []string { return r.path }

// CacheDir returns the result cache directory.
func (r *Runtime) CacheDir() string { return r.cacheDir }

// RuntimeConf is what a runtime knows about one attachment.
type RuntimeConf struct {
	ContainerID    string
	NetNS          string
	IfName         string
	Args           [][2]string
	CapabilityArgs map[string]any
	// CacheDir overrides the Runtime's cache directory for this call.
	CacheDir string
}

func (r *Runtime) cacheDirFor(rt *RuntimeConf) string {
	if rt == nil {
		return r.cacheDir
	}
	return r.cacheDirOr(rt.CacheDir)
}

// cacheDirOr is dir, or the Runtime's cache directory when dir is empty.
func (r *Runtime) cacheDirOr(dir string) string {
	if dir != "" {
		return dir
	}
	return r.cacheDir
}

// PluginError says which plugin of which network failed at which verb.
// It wraps the plugin's *Error, so errors.As and CodeOf see the code.
type PluginError struct {
	Network string
	Verb    Verb
	Plugin  string // type
	Index   int    // position in the chain, from 0
	Err     error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("network %q: plugin %q (#%d) %s: %v", e.Network, e.Plugin, e.Index, e.Verb, e.Err)
}

func (e *PluginError) Unwrap() error { return e.Err }

func validateRuntimeConf(rt *RuntimeConf, needNetNS bool) error {
	if rt == nil {
		return Errorf(CodeInvalidEnvironment, "runtime config is missing")
	}
	if err := ValidateContainerID(rt.ContainerID); err != nil {
		return Errorf(CodeInvalidEnvironment, "%v", err)
	}
	if err := ValidateIfName(rt.IfName); err != nil {
		return Errorf(CodeInvalidEnvironment, "%v", err)
	}
	if needNetNS && rt.NetNS == "" {
		return Errorf(CodeInvalidEnvironment, "network namespace path is empty")
	}
	return nil
}

// AddNetworkList runs ADD through the chain, each plugin getting the
// previous one's result, caches the final result and returns it in the
// list's version. When a plugin fails and rollback is on, the plugins that
// ran (the failing one included) get DEL in reverse order, and the error
// reports both the ADD failure and any rollback failure. The rollback
// runs even when ctx is done, for at most the time ctx allowed the ADD
// (DefaultRollbackTimeout without a deadline), so a caller's deadline
// bounds the whole call to about twice itself.
func (r *Runtime) AddNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) (*Result, error) {
	if err := validateRuntimeConf(rt, true); err != nil {
		return nil, err
	}
	start := time.Now()
	var prev *Result
	for i, p := range list.Plugins {
		out, err := r.runPlugin(ctx, pluginCall{verb: VerbAdd, list: list, index: i, prev: prev, rt: rt})
		var res *Result
		if err == nil {
			res, err = decodeAddResult(out, list.CNIVersion)
			if err != nil {
				err = &PluginError{Network: list.Name, Verb: VerbAdd, Plugin: p.Type, Index: i, Err: err}
			}
		}
		if err != nil {
			if r.rollback {
				// The caller's deadline may be what failed the ADD: the
				// rollback gets its own, so it runs but cannot hang.
				rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget(ctx, start))
				rbErr := r.delChain(rbCtx, list, i, prev, rt)
				cancel()
				if rbErr != nil {
					err = errors.Join(err, fmt.Errorf("rollback after failed ADD: %w", rbErr))
				}
			}
			return nil, err
		}
		prev = res
	}
	if prev == nil {
		return nil, Errorf(CodeInvalidNetworkConfig, "network %q has no plugins", list.Name)
	}
	if err := writeCache(r.cacheDirFor(rt), list, rt, prev); err != nil {
		return nil, err
	}
	return prev, nil
}

// rollbackBudget is how long the rollback of an ADD that started at start
// may take. A caller that set a deadline said how long it is prepared to
// wait: the rollback gets that budget once more, measured from the ADD's
// start, so an ADD given 2 s does not hold its caller for 30 s more. Only
// a caller without a deadline gets DefaultRollbackTimeout.
func rollbackBudget(ctx context.Context, start time.Time) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return DefaultRollbackTimeout
	}
	return deadline.Sub(start)
}

func decodeAddResult(out []byte, version string) (*Result, error) {
	// A result without cniVersion is taken to be in the config's version,
	// as libcni does: lax third-party plugins exist.
	res, err := parseResult(out, version)
	if err != nil {
		e := AsError(err, CodeInvalidResult)
		if e.Code == CodeDecodingFailure {
			e = runtimeErrorf(CodeInvalidResult, "plugin printed an invalid result: %s", e.Msg).WithDetails(e.Details)
		}
		return nil, e
	}
	if res.CNIVersion == version {
		return res, nil
	}
	return res.ConvertTo(version)
}

// DelNetworkList runs DEL through the chain in reverse order. From 0.4.0
// on, each plugin gets the cached result as prevResult; a cache entry that
// is missing or corrupt is not an obstacle, DEL goes on without it. Every
// plugin gets its DEL even when an earlier one failed, so one stuck plugin
// does not leak the others' resources; the cache entry is kept until DEL
// has succeeded everywhere, so a retry still has the result. The
// attachment's temp cache files that dead writers left are swept whatever
// the outcome.
func (r *Runtime) DelNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) error {
	if err := validateRuntimeConf(rt, false); err != nil {
		return err
	}
	dir := r.cacheDirFor(rt)
	path := cachePath(dir, list.Name, rt.ContainerID, rt.IfName)
	// Best effort: a stray temp file holds nothing of the network, and
	// failing DEL for it would have the caller retry a teardown that is
	// done. GC sweeps again, and reports what it cannot remove.
	_ = sweepDeadTemps(dir, tempPrefix(path))
	var prev *Result
	if AtLeast(list.CNIVersion, "0.4.0") {
		if a, err := readCache(path); err == nil && a != nil && a.Result != nil {
			prev, _ = a.Result.ConvertTo(list.CNIVersion)
		}
	}
	if err := r.delChain(ctx, list, len(list.Plugins)-1, prev, rt); err != nil {
		return err
	}
	return removeCache(path)
}

// delChain runs DEL on plugins last..0.
func (r *Runtime) delChain(ctx context.Context, list *NetworkConfigList, last int, prev *Result, rt *RuntimeConf) error {
	var errs []error
	for i := last; i >= 0; i-- {
		if _, err := r.runPlugin(ctx, pluginCall{verb: VerbDel, list: list, index: i, prev: prev, rt: rt}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckNetworkList runs CHECK through the chain with the cached result. It
// needs 0.4.0 or later and a cached result; disableCheck turns it off.
func (r *Runtime) CheckNetworkList(ctx context.Context, list *NetworkConfigList, rt *RuntimeConf) error {
	if !AtLeast(list.CNIVersion, VerbCheck.Since()) {
		return Errorf(CodeIncompatibleVersion, "network %q: cniVersion %s has no CHECK (%s or later)", list.Name, list.CNIVersion, VerbCheck.Since())
	}
	if list.DisableCheck {
		return nil
	}
	if err := validateRuntimeConf(rt, true); err != nil {
		return err
	}
	path := cachePath(r.cacheDirFor(rt), list.Name, rt.ContainerID, rt.IfName)
	a, err := readCache(path)
	if err != nil {
		return AsError(err, CodeIOFailure)
	}
	if a == nil || a.Result == nil {
		return Errorf(CodeUnknownContainer, "network %q: no cached result for container %q interface %q (%s)", list.Name, rt.ContainerID, rt.IfName, path)
	}
	prev, err := a.Result.ConvertTo(list.CNIVersion)
	if err != nil {
		return err
	}
	for i := range list.Plugins {
		if _, err := r.runPlugin(ctx, pluginCall{verb: VerbCheck, list: list, index: i, prev: prev, rt: rt}); err != nil {
			return err
		}
	}
	return nil
}

// StatusNetworkList asks every plugin whether it can serve ADD (1.1.0 and
// later; older networks are assumed ready). All plugins are asked and all
// failures returned; CodeOf gives the first one's code.
func (r *Runtime) StatusNetworkList(ctx context.Context, list *NetworkConfigList) error {
	if !AtLeast(list.CNIVersion, VerbStatus.Since()) {
		return nil
	}
	var errs []error
	for i := range list.Plugins {
		if _, err := r.runPlugin(ctx, pluginCall{verb: VerbStatus, list: list, index: i}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GCAttachment names an attachment that must survive GC: an entry of the
// GC verb's cni.dev/valid-attachments, which the runtime sends and skel
// decodes for the plugin.
type GCAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// GCNetworkList deletes every cached attachment of the network that is
// not in valid, then (1.1.0 and later) sends GC with the valid attachments
// to every plugin so they can free what no cache entry remembers. Every
// failure is collected; GC never stops at the first.
//
// First it sweeps the temp files that dead writers left in the cache
// directory, of every network: such a file belongs to no attachment and
// to no live process (cachetemp.go), so it is swept even when the
// network disables GC, which is about attachments other runtimes may
// share.
func (r *Runtime) GCNetworkList(ctx context.Context, list *NetworkConfigList, valid []GCAttachment) error {
	var errs []error
	if err := sweepDeadTemps(r.cacheDir, "."); err != nil {
		errs = append(errs, err)
	}
	if list.DisableGC {
		return errors.Join(errs...)
	}
	keep := make(map[GCAttachment]bool, len(valid))
	for _, v := range valid {
		keep[v] = true
	}
	cached, err := r.CachedAttachments("", list.Name)
	if err != nil {
		errs = append(errs, err)
	}
	for _, a := range cached {
		if keep[GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName}] {
			continue
		}
		rt := &RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.Args, CapabilityArgs: a.CapabilityArgs}
		if err := r.DelNetworkList(ctx, list, rt); err != nil {
			errs = append(errs, fmt.Errorf("stale attachment %s/%s: %w", a.ContainerID, a.IfName, err))
		}
	}
	if AtLeast(list.CNIVersion, VerbGC.Since()) {
		if valid == nil {
			valid = []GCAttachment{}
		}
		for i := range list.Plugins {
			// Both keys, as libcni sends them: the spec's text once said
			// cni.dev/attachments, and a plugin written to it must not
			// read "no valid attachments" and collect everything.
			extra := map[string]any{"cni.dev/valid-attachments": valid, "cni.dev/attachments": valid}
			if _, err := r.runPlugin(ctx, pluginCall{verb: VerbGC, list: list, index: i, extra: extra}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
