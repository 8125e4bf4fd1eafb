package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/netns"
)

// The data-path benchmark's traffic generators, Debian's iperf3 (TCP
// throughput) and sockperf (TCP request/response). Each measurement
// starts its own server in the destination namespace and stops it by PID
// when the client is done, so that no idle server of another path wakes
// up during a measurement, and nothing outlives the benchmark.

// dpTools are the programs the benchmark runs; `make bench-datapath`
// installs them.
var dpTools = []string{"iperf3", "sockperf"}

const (
	iperfPort    = 5201
	sockperfPort = 11111
)

// sample is one measurement of one path.
type sample struct {
	Gbps float64 // TCP throughput, one stream, at the receiver
	RRps float64 // request/response transactions per second
	P50  float64 // round-trip time of a transaction, µs
	P99  float64
	// CRRps is connections per second, each a TCP connect, one byte
	// each way and a close: what a connection's first packets cost
	// (conntrack entries made, policy judged) rather than its steady state.
	CRRps float64
}

// serverProc is a server process the benchmark started in a namespace,
// as the leader of a process group of its own.
type serverProc struct {
	cmd *exec.Cmd
	out *bytes.Buffer // stdout and stderr, read only after exit
	// exited is closed once the leader has exited; it is not reaped
	// until stop, so that its group cannot be reused before stop has
	// signalled what is left in it.
	exited chan struct{}
}

// startServer starts name args inside the namespace at nsPath and waits
// until it listens on port. t.Cleanup stops it if the caller has not.
func startServer(t testing.TB, nsPath string, port int, name string, args ...string) *serverProc {
	t.Helper()
	cmd := exec.Command(name, args...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own: a terminal's ^C reaches the benchmark,
	// whose cleanup stops the server, and stop reaches anything the server
	// forked (a sockperf server was once seen outliving its parent).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Should a child have left the group holding the output pipe, Wait
	// still returns.
	cmd.WaitDelay = 5 * time.Second
	if err := netns.Do(nsPath, cmd.Start); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	s := &serverProc{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { waitExitNoReap(cmd.Process.Pid); close(s.exited) }()
	t.Cleanup(s.stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := listening(cmd.Process.Pid, port)
		if err == nil && ok {
			return s
		}
		select {
		case <-s.exited:
			s.stop()
			t.Fatalf("%s exited before it listened on port %d: %s", name, port, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on port %d after 10s (%v)", name, port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitExitNoReap blocks until process pid, a child of this process, has
// exited, and leaves it to be reaped.
func waitExitNoReap(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// stop ends the server's process group (SIGTERM, SIGKILL after 3 s),
// then reaps the leader. Safe to call more than once.
func (s *serverProc) stop() {
	if s.cmd.ProcessState != nil {
		return // reaped already
	}
	pgid := s.cmd.Process.Pid
	select {
	case <-s.exited:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-s.exited
		}
	}
	// The leader is a zombie, which keeps its group's ID from being
	// reused: whatever is left in the group is the server's.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// listening reports whether the network namespace of process pid has a
// TCP socket listening on port: /proc/PID/net/tcp lists the sockets of
// that process's namespace, so no packet is needed to find out.
func listening(pid, port int) (bool, error) {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return false, err
		}
		if listensOn(b, port) {
			return true, nil
		}
	}
	return false, nil
}

// listensOn reports whether a /proc/net/tcp table has a socket in state
// LISTEN (0A) whose local port is port.
func listensOn(table []byte, port int) bool {
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			return true
		}
	}
	return false
}

// runClient runs name args inside the namespace at nsPath to its end,
// killed if it takes longer than timeout, and returns its stdout.
func runClient(nsPath string, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := netns.Do(nsPath, cmd.Start); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// throughput measures TCP throughput of one stream from the client
// namespace to addr in the server namespace for secs seconds, in Gbit/s
// as the receiver counted it.
func throughput(t testing.TB, p *dpPath, secs int) (float64, error) {
	t.Helper()
	srv := startServer(t, p.server, iperfPort, "iperf3", "--server", "--one-off",
		"--bind", p.addr.String(), "--port", strconv.Itoa(iperfPort))
	defer srv.stop()
	out, err := runClient(p.client, time.Duration(secs)*time.Second+30*time.Second, "iperf3",
		"--client", p.addr.String(), "--port", strconv.Itoa(iperfPort), "--time", strconv.Itoa(secs),
		"--connect-timeout", "5000", "--json")
	if err != nil {
		return 0, err
	}
	return parseIperf3(out)
}

// parseIperf3 reads the receiver's rate, in Gbit/s, from iperf3's JSON.
func parseIperf3(out []byte) (float64, error) {
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("iperf3 output: %v", err)
	}
	if r.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", r.Error)
	}
	if r.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3: no received rate in its output")
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}

// requestResponse measures TCP ping-pong from the client namespace to
// addr for secs seconds: transactions per second and the round trip's
// median and 99th percentile.
func requestResponse(t testing.TB, p *dpPath, secs int) (rr, p50, p99 float64, err error) {
	t.Helper()
	srv := startServer(t, p.server, sockperfPort, "sockperf", "server", "--tcp",
		"--ip", p.addr.String(), "--port", strconv.Itoa(sockperfPort))
	defer srv.stop()
	out, err := runClient(p.client, time.Duration(secs)*time.Second+30*time.Second, "sockperf", "ping-pong", "--tcp",
		"--ip", p.addr.String(), "--port", strconv.Itoa(sockperfPort), "--time", strconv.Itoa(secs), "--full-rtt")
	if err != nil {
		return 0, 0, 0, err
	}
	return parseSockperf(out)
}

var (
	ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	// The measured part of the run, after sockperf's warm-up.
	sockperfValid = regexp.MustCompile(`\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)`)
	sockperfPct   = regexp.MustCompile(`percentile (\d+\.\d+) =\s*([0-9.]+)`)
)

// parseSockperf reads a ping-pong client's report (run with --full-rtt,
// so percentiles are round trips in µs): transactions per second are the
// replies received in the valid duration over that duration.
func parseSockperf(out []byte) (rr, p50, p99 float64, err error) {
	s := ansiEscape.ReplaceAllString(string(out), "")
	m := sockperfValid.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, 0, fmt.Errorf("sockperf: no valid-duration line in its output:\n%s", s)
	}
	secs, err1 := strconv.ParseFloat(m[1], 64)
	replies, err2 := strconv.ParseFloat(m[2], 64)
	if err1 != nil || err2 != nil || secs <= 0 || replies <= 0 {
		return 0, 0, 0, fmt.Errorf("sockperf: no transactions measured: %q", m[0])
	}
	pct := map[string]float64{}
	for _, m := range sockperfPct.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("sockperf: percentile %s: %v", m[1], err)
		}
		pct[m[1]] = v
	}
	p50, ok50 := pct["50.000"]
	p99, ok99 := pct["99.000"]
	if !ok50 || !ok99 {
		return 0, 0, 0, fmt.Errorf("sockperf: no 50th or 99th percentile in its output:\n%s", s)
	}
	return replies / secs, p50, p99, nil
}

// measure takes one sample of p: throughput, request/response, then
// connect/request/response.
func measure(t testing.TB, p *dpPath, secs int) sample {
	t.Helper()
	gbps, err := throughput(t, p, secs)
	if err != nil {
		t.Fatalf("%s: throughput: %v", p.name, err)
	}
	rr, p50, p99, err := requestResponse(t, p, secs)
	if err != nil {
		t.Fatalf("%s: request/response: %v", p.name, err)
	}
	crr, err := connectRate(p, secs)
	if err != nil {
		t.Fatalf("%s: connect/request/response: %v", p.name, err)
	}
	return sample{Gbps: gbps, RRps: rr, P50: p50, P99: p99, CRRps: crr}
}

// waitReachable waits until a TCP connection from the client namespace
// to p's server address gets an answer. The port has no listener, so the
// answer is a reset: it proves the route both ways, and warms neighbour
// entries, without a server.
func waitReachable(t testing.TB, p *dpPath) {
	t.Helper()
	addr := netip.AddrPortFrom(p.addr, iperfPort).String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := netns.Do(p.client, func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not reachable from the client namespace after 30s: %v", p.name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
