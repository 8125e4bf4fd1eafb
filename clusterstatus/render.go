package clusterstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a person: a table of the nodes, the control
// objects, then the problems and warnings.
func WriteText(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tAGENT\tVERSION\tDATASTORE\tROUTING\tENCRYPTION\tPOLICY\tRULES\tPODS")
	for _, n := range r.Nodes {
		state := "ready"
		if !n.Ready {
			state = "NOT READY"
		}
		row := []string{n.Node, state, "-", "-", "-", "-", "-", "-", "-"}
		if d := n.Agent; d != nil {
			row[2] = version(d.Version, d.Revision)
			row[3] = d.Datastore + "/" + d.IPAM
			row[4] = d.RoutingMode
			row[5] = d.Encryption.Mode
			if d.Encryption.Mode == "wireguard" {
				row[5] = fmt.Sprintf("wireguard %s, %d peers", d.Encryption.Implementation, d.Encryption.Peers)
			}
			if p := d.Policy; p != nil {
				row[6], row[7] = "never applied", "-"
				if !p.LastApplied.IsZero() {
					row[6] = "applied " + seconds(p.AgeSeconds) + " ago"
					row[7] = strconv.Itoa(p.Rules)
				}
			} else if !d.Degraded {
				row[6] = "off"
			}
			if d.Attachments >= 0 {
				row[8] = strconv.Itoa(d.Attachments)
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeControl(w, r.Control)
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "\nOK: every node's agent is ready")
	} else {
		fmt.Fprintf(w, "\n%d %s:\n", len(r.Problems), plural(len(r.Problems), "problem", "problems"))
		for _, p := range r.Problems {
			fmt.Fprintln(w, "  - "+p)
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w, "warnings:")
		for _, p := range r.Warnings {
			fmt.Fprintln(w, "  - "+p)
		}
	}
	return nil
}

func writeControl(w io.Writer, c ControlReport) {
	fmt.Fprintf(w, "\nIPAM model: %s", c.Model)
	if c.Note != "" {
		fmt.Fprintf(w, " (%s)", c.Note)
	}
	fmt.Fprintln(w)
	crds := "none"
	if len(c.IPAMCRDs) > 0 {
		crds = strings.Join(c.IPAMCRDs, ", ")
	}
	cnp := "not installed"
	if c.ClusterNetworkPolicyCRD {
		cnp = "installed"
	}
	fmt.Fprintf(w, "CRDs: podnet.io: %s; ClusterNetworkPolicy: %s\n", crds, cnp)
	if len(c.Pools) > 0 || c.Blocks > 0 {
		var ps []string
		for _, p := range c.Pools {
			s := p.Name + " " + p.CIDR
			if p.Disabled {
				s += " (disabled)"
			}
			ps = append(ps, s)
		}
		var bs []string
		for n, k := range c.BlocksByNode {
			bs = append(bs, fmt.Sprintf("%s %d", orNone(n), k))
		}
		sort.Strings(bs)
		fmt.Fprintf(w, "pools: %s; blocks: %d (%s)\n", strings.Join(ps, ", "), c.Blocks, strings.Join(bs, ", "))
	}
}

func version(v, rev string) string {
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return v + " " + rev
	}
	return v
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
