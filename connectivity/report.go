package connectivity

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the run's outcome, `-o json` as is.
type Report struct {
	Namespace string   `json:"namespace"`
	Nodes     []string `json:"nodes"`
	// Network says what runs the cluster's pod network, as far as the
	// run could tell.
	Network   string   `json:"network"`
	Notes     []string `json:"notes,omitempty"`
	Results   []Result `json:"results"`
	Passed    int      `json:"passed"`
	Failed    int      `json:"failed"`
	NotRun    int      `json:"notRun"`
	NotJudged int      `json:"notJudged"`
	Millis    int64    `json:"durationMillis"`
	// Interrupted: the run was stopped before every check ran.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Add records a result and counts it.
func (r *Report) Add(res Result) {
	res.Millis = res.Duration.Milliseconds()
	r.Results = append(r.Results, res)
	switch res.Status {
	case Pass:
		r.Passed++
	case Fail:
		r.Failed++
	case NotRun:
		r.NotRun++
	case NotJudged:
		r.NotJudged++
	}
}

// OK: nothing failed and the run was not cut short.
func (r *Report) OK() bool { return r.Failed == 0 && !r.Interrupted }

// WriteText writes the table people read.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "namespace %s, nodes %s\nnetwork: %s\n", r.Namespace, strings.Join(r.Nodes, ", "), r.Network)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w, "TIME: the check's, its prober pod's start included; PROBE: the probe's own, and its attempts")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tTIME\tPROBE\tDETAIL")
	for _, res := range r.Results {
		t, p := "-", "-"
		if res.Status != NotRun {
			t = res.Duration.Round(100 * time.Millisecond).String()
		}
		if res.Attempts > 0 {
			p = fmt.Sprintf("%s/%d", (time.Duration(res.ProbeMillis) * time.Millisecond).String(), res.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Check, res.Status, t, p, res.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "PASSED"
	if !r.OK() {
		verdict = "FAILED"
	}
	if r.Interrupted {
		verdict += " (interrupted)"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d not run, %d not judged in %s\n",
		verdict, r.Passed, r.Failed, r.NotRun, r.NotJudged, (time.Duration(r.Millis) * time.Millisecond).Round(100*time.Millisecond))
	return err
}
