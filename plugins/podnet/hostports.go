package main

import (
	"encoding/json"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/portmap"
	"github.com/podnet/podnet/portmap/portmapcni"
)

// Host ports in process. When the network gives podnet the portMappings
// capability, podnet publishes the mappings itself with the portmap
// library, in this process: a pod's ADD and DEL are then one plugin exec
// instead of two, which is most of what a pod's set-up costs. The rules
// are the ones podnet-portmap makes (same table, same owner tags), so the
// two can be mixed on a node and GC by either cleans up after both.
// Chaining podnet-portmap after podnet instead still works: then podnet
// sees no portMappings and leaves them to it.

// hostPortsDeclared reports whether the network hands podnet the
// portMappings capability.
func (a *attachment) hostPortsDeclared() bool {
	return a.args.NetConf.Capabilities["portMappings"]
}

// hostPortRequest is the portmap request for this attachment, nil when
// there is nothing to publish.
func (a *attachment) hostPortRequest(prev *cni.Result) (*portmap.Request, error) {
	if !a.hostPortsDeclared() {
		return nil, nil
	}
	c, err := portmap.ParseConfig(a.args.StdinData)
	if err != nil {
		return nil, err
	}
	if len(c.Mappings) == 0 {
		return nil, nil
	}
	return &portmap.Request{Owner: a.owner, Config: c, Container: portmapcni.Container(prev)}, nil
}

// hostPortsToDelete is the portmap request of a DEL, nil when there is
// nothing to remove. A runtime sends DEL the capability args of ADD, so
// an empty portMappings means nothing was published: most pods have no
// host port, and their DEL must not pay for a look through the tables.
// Only when the mappings are absent or unreadable (DEL must clean up
// whatever it is given) does it sweep the tables for the attachment's
// elements. The request's container is prevResult's: with the mappings,
// it names the keys ADD wrote, which DEL then reads by key.
func (a *attachment) hostPortsToDelete() *portmap.Request {
	if !a.hostPortsDeclared() {
		return nil
	}
	r, err := a.hostPortRequest(a.args.NetConf.PrevResult)
	switch {
	case r != nil:
		return r
	case err == nil && a.mappingsGiven():
		return nil
	}
	return &portmap.Request{Owner: a.owner, Config: &portmap.Config{}, Sweep: true}
}

// mappingsGiven reports whether runtimeConfig carries portMappings at
// all, even an empty list.
func (a *attachment) mappingsGiven() bool {
	var c struct {
		RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig"`
	}
	if json.Unmarshal(a.args.StdinData, &c) != nil {
		return false
	}
	_, ok := c.RuntimeConfig["portMappings"]
	return ok
}

// checkHostPorts verifies the published mappings against prevResult.
func (a *attachment) checkHostPorts(prev *cni.Result) error {
	r, err := a.hostPortRequest(prev)
	if err != nil || r == nil {
		return err
	}
	return portmap.Check(r)
}

// gcHostPorts drops the host ports of this network's attachments that are
// not valid.
func gcHostPorts(network string, valid []tag.Owner) error {
	return portmap.GC(network, valid, portmap.DefaultLockPath)
}
