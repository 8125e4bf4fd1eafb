package nodeclean

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
)

// Report is what one removal did, or would do.
type Report struct {
	DryRun bool   `json:"dryRun,omitempty"`
	Steps  []Step `json:"steps"`
	Kept   []Kept `json:"kept,omitempty"`
	// Errors are the steps that failed, each naming its step.
	Errors []string `json:"errors,omitempty"`
}

// Clean reports whether there was nothing of podnet on the node.
func (r Report) Clean() bool { return len(r.Steps) == 0 }

// Remove surveys the node and carries out the plan, in the calling
// thread's network namespace; with dryRun it only plans. Every step is
// tried even when one fails; the error joins the failures.
func Remove(p Paths, dryRun bool) (Report, error) {
	if err := p.Check(); err != nil {
		return Report{}, err
	}
	f, err := Survey(p)
	if err != nil {
		return Report{}, err
	}
	steps, kept := Plan(f)
	r := Report{DryRun: dryRun, Steps: steps, Kept: kept}
	if dryRun {
		return r, nil
	}
	var errs []error
	for _, s := range steps {
		if err := apply(s); err != nil {
			err = fmt.Errorf("%s: %w", s, err)
			errs = append(errs, err)
			r.Errors = append(r.Errors, err.Error())
		}
	}
	return r, errors.Join(errs...)
}

// Verify surveys the node and returns what removal would still do:
// nothing when no trace of podnet is left.
func Verify(p Paths) (Report, error) {
	return Remove(p, true)
}

// apply carries out one step; what is already gone is done.
func apply(s Step) error {
	switch s.Kind {
	case KindConfig, KindPlugin, KindState, KindRun, KindRecord:
		return os.RemoveAll(s.Target)
	case KindLink:
		return deleteLink(s.Target)
	case KindRoute:
		return deleteRoute(s.route)
	case KindTable:
		return deleteTable(s.table)
	case KindSysctl:
		return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: s.Target, Value: s.value}})
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

func deleteLink(name string) error {
	h, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	return dataplane.DeleteLink(h, name)
}

func deleteRoute(r Route) error {
	h, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	nr := &netlink.Route{Family: r.Family, Table: r.Table, Type: r.Type, Priority: r.Priority,
		Dst: dataplane.IPNet(r.Dst), Protocol: route.RouteProtocol}
	// A route through podnet.vxlan went with the device.
	if err := h.RouteDel(nr); err != nil && !dataplane.IsNotFound(err) {
		return err
	}
	return nil
}

func deleteTable(t Table) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open nftables netlink socket: %w", err)
	}
	c.DelTable(&nftables.Table{Name: t.Name, Family: familyOf(t.Family)})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: delete table %s: %w", t, err)
	}
	return nil
}
