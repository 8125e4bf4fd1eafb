package cni

import (
	"context"
	"os"
	"strings"
)

// pluginCall is one execution of one plugin of a list.
type pluginCall struct {
	verb  Verb
	list  *NetworkConfigList
	index int          // the plugin's position in list.Plugins
	prev  *Result      // prevResult; nil for none
	rt    *RuntimeConf // nil for the verbs that name no attachment
	// extra are top-level keys added to the plugin's configuration (GC's
	// valid attachments).
	extra map[string]any
}

// runPlugin executes c. Every failure is a *PluginError naming the
// network, verb, plugin and position.
func (r *Runtime) runPlugin(ctx context.Context, c pluginCall) ([]byte, error) {
	p := c.list.Plugins[c.index]
	wrap := func(err error) error {
		return &PluginError{Network: c.list.Name, Verb: c.verb, Plugin: p.Type, Index: c.index, Err: err}
	}
	path, err := r.exec.FindInPath(p.Type, r.path)
	if err != nil {
		return nil, wrap(err)
	}
	var capArgs map[string]any
	if c.rt != nil {
		capArgs = c.rt.CapabilityArgs
	}
	stdin, err := buildPluginConfig(c.list, p, c.prev, capArgs, c.extra)
	if err != nil {
		return nil, wrap(err)
	}
	env, err := r.environFor(c.verb, c.rt)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := r.execOnce(ctx, path, stdin, env)
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

func (r *Runtime) execOnce(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	if r.execTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.execTimeout)
		defer cancel()
	}
	return r.exec.ExecPlugin(ctx, path, stdin, env)
}

func (r *Runtime) environFor(verb Verb, rt *RuntimeConf) ([]string, error) {
	var vars []string
	if rt != nil && verb.PerAttachment() {
		args, err := FormatArgs(rt.Args)
		if err != nil {
			return nil, err
		}
		vars = []string{
			"CNI_CONTAINERID=" + rt.ContainerID,
			"CNI_NETNS=" + rt.NetNS,
			"CNI_IFNAME=" + rt.IfName,
			"CNI_ARGS=" + args,
		}
	}
	return r.environ(verb, vars), nil
}

// environ is the process environment without any inherited CNI_*
// variable, plus CNI_COMMAND, CNI_PATH and vars.
func (r *Runtime) environ(verb Verb, vars []string) []string {
	base := os.Environ()
	env := make([]string, 0, len(base)+len(vars)+2)
	for _, kv := range base {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND="+string(verb), "CNI_PATH="+strings.Join(r.path, string(os.PathListSeparator)))
	return append(env, vars...)
}
