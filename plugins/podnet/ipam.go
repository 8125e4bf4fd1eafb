package main

import (
	"context"
	"os"
	"strings"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/ipamcni"
)

// ipamClient is the seam between the plugin and address management:
// podnet-ipam called in process, or any other IPAM plugin run with the
// same configuration and environment (execIPAM).
type ipamClient interface {
	// Add allocates. Its addresses may not be durable yet: see Finish.
	Add(context.Context) (*cni.Result, error)
	// Finish ends an Add: it returns once the allocation is durable, or
	// why it is not, and lets go of the store. ADD calls it, whatever
	// happened, before it reports the result and before Del may undo it.
	Finish(context.Context) error
	Del(context.Context) error
	Check(context.Context) error
	Status(context.Context) error
	GC(context.Context) error
}

// newIPAM returns the client for the configured IPAM type: podnet-ipam
// runs in this process (no second exec on the ADD path); anything else is
// exec'd as a delegate.
func newIPAM(c *conf, args *skel.CmdArgs) (ipamClient, error) {
	if c.IPAMType == "podnet-ipam" {
		return newInProcessIPAM(c, args)
	}
	path, err := cni.FindInPath(c.IPAMType, args.Path)
	if err != nil {
		return nil, err
	}
	return &execIPAM{path: path, stdin: args.StdinData, version: c.CNIVersion}, nil
}

// newReleaseIPAM is newIPAM for DEL: podnet-ipam reads only what a
// release needs, so that a configuration edited since the ADD into one
// that no longer validates does not fail every retry of the DEL.
func newReleaseIPAM(c *conf, args *skel.CmdArgs) (ipamClient, error) {
	if c.IPAMType != "podnet-ipam" {
		return newIPAM(c, args)
	}
	req, err := ipamcni.ParseReleaseRequest(args.StdinData)
	if err != nil {
		return nil, err
	}
	return &inProcessIPAM{req: req, args: args}, nil
}

// execIPAM runs an IPAM plugin as the specification's delegation asks:
// the same stdin, the same environment but CNI_COMMAND. The child stays
// in this process's process group: a runtime that kills the plugin's
// group on a timeout then kills the IPAM too.
type execIPAM struct {
	path    string
	stdin   []byte
	version string
}

func (e *execIPAM) Add(ctx context.Context) (*cni.Result, error) {
	out, err := e.run(ctx, cni.VerbAdd)
	if err != nil {
		return nil, err
	}
	res, err := cni.ParseResult(out)
	if err != nil {
		return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM %s: %v", e.name(), err)
	}
	if res, err = res.ConvertTo(cni.CurrentVersion); err != nil {
		return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM %s: %v", e.name(), err)
	}
	return res, nil
}

// Finish has nothing to wait for: the delegate's ADD was complete when
// it exited.
func (e *execIPAM) Finish(context.Context) error { return nil }

func (e *execIPAM) Del(ctx context.Context) error    { return e.do(ctx, cni.VerbDel) }
func (e *execIPAM) Check(ctx context.Context) error  { return e.do(ctx, cni.VerbCheck) }
func (e *execIPAM) Status(ctx context.Context) error { return e.do(ctx, cni.VerbStatus) }
func (e *execIPAM) GC(ctx context.Context) error     { return e.do(ctx, cni.VerbGC) }

// do runs a verb whose output, if any, says nothing more than success.
func (e *execIPAM) do(ctx context.Context, verb cni.Verb) error {
	_, err := e.run(ctx, verb)
	return err
}

func (e *execIPAM) name() string { return e.path[strings.LastIndexByte(e.path, '/')+1:] }

func (e *execIPAM) run(ctx context.Context, verb cni.Verb) ([]byte, error) {
	env := make([]string, 0, 16)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_COMMAND=") {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND="+string(verb))
	// The runtime's executor, but in this plugin's process group (see
	// SameProcessGroup); it also retries a binary being replaced.
	out, err := (&cni.RawExec{SameProcessGroup: true}).ExecPlugin(ctx, e.path, e.stdin, env)
	if err != nil {
		ce := cni.AsError(err, cni.CodePluginCrashed)
		return nil, cni.Errorf(ce.Code, "IPAM %s %s: %s", e.name(), verb, ce.Msg).WithDetails(ce.Details)
	}
	return out, nil
}
