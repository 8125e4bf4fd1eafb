package flowcap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/sysctlrecord"
	"github.com/podnet/podnet/netns"
)

// AcctSysctl turns conntrack's packet and byte counters on.
var AcctSysctl = dataplane.Sysctl{Key: "net/netfilter/nf_conntrack_acct", Value: "1"}

// The sources of Config.Lost.
const (
	SourceConntrack = "conntrack"
	SourceNFLOG     = "nflog"
)

// Config configures the capture.
type Config struct {
	// NetNS is the node's network namespace (a path); empty: the
	// process's own.
	NetNS string
	// Node is this node's name, written in every record.
	Node string
	// Group is the NFLOG group of the drops (default DefaultGroup).
	Group uint16
	// Index names the rules behind an id (nil: records name no rules);
	// Resolver the pods behind addresses (nil: no forwarded connection
	// is recorded, none having a pod of this node).
	Index    RuleIndex
	Resolver Resolver
	// Sink receives every record, from one goroutine at a time; it must
	// not block (the kernel drops the events that come meanwhile).
	Sink func(flows.Record)
	// Lost is called with SourceConntrack for each conntrack event the
	// kernel dropped (the socket's drop count), and with SourceNFLOG each
	// time the NFLOG socket overran (the kernel does not say by how
	// much); nil: not counted.
	Lost func(source string)
	// SysctlRecord is the file in which the original value of
	// nf_conntrack_acct is recorded before it is first changed
	// (internal/sysctlrecord); empty: not recorded.
	SysctlRecord string
	// ReceiveBuffer is the conntrack socket's receive buffer in bytes
	// (default ReceiveBuffer).
	ReceiveBuffer int
	Logger        *slog.Logger
}

// Service captures flows until its context ends. Create it with New.
type Service struct {
	cfg Config
	log *slog.Logger
	j   joiner

	readyC    chan struct{}
	readyOnce sync.Once
	started   atomic.Bool
	openErr   atomic.Pointer[error]

	// emitMu serializes the sink.
	emitMu sync.Mutex
	// foldMu guards fold, shared by the NFLOG reader and the expiry.
	foldMu sync.Mutex
	fold   *folder
	// rules is the conntrack reader's own.
	rules *ruleMemory
}

// New returns the capture; Run starts it.
func New(cfg Config) *Service {
	if cfg.Group == 0 {
		cfg.Group = DefaultGroup
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReceiveBuffer <= 0 {
		cfg.ReceiveBuffer = ReceiveBuffer
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("service", "flows"),
		j:      joiner{node: cfg.Node, res: cfg.Resolver, index: cfg.Index},
		readyC: make(chan struct{}), fold: newFolder(FoldWindow, DefaultFoldEntries), rules: newRuleMemory(DefaultRuleMemory)}
}

// Ready returns nil while both sockets listen.
func (s *Service) Ready() error {
	if s.started.Load() {
		return nil
	}
	if p := s.openErr.Load(); p != nil {
		return fmt.Errorf("flow capture not listening: %w", *p)
	}
	return errors.New("flow capture not listening yet")
}

// ReadyC is closed once both sockets listen.
func (s *Service) ReadyC() <-chan struct{} { return s.readyC }

// Run turns conntrack's counters on, listens to conntrack's events and
// the drops' NFLOG group in the node's namespace, and sends records to
// the sink until ctx ends. A socket that cannot be opened, or fails for
// another reason than lost events, ends Run with its error.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Sink == nil {
		return errors.New("flowcap: no sink")
	}
	ct, lg, err := s.open()
	if err != nil {
		s.openErr.Store(&err)
		return err
	}
	s.started.Store(true)
	s.readyOnce.Do(func() { close(s.readyC) })
	defer s.started.Store(false)
	s.log.Info("flow capture listening", "nflog_group", s.cfg.Group)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errc <- s.readConntrack(ct) })
	wg.Go(func() { errc <- s.readNFLOG(lg) })
	wg.Go(func() { s.expireBursts(ctx) })
	// A reader's error after ctx ended is its closed socket's: not
	// returned (errc has room for both).
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	cancel()
	ct.close()
	lg.Close()
	wg.Wait()
	return runErr
}

// open binds both sockets and sets nf_conntrack_acct in the node's
// namespace, once nf_conntrack, whose sysctls appear only then, is
// surely loaded (loadConntrack).
func (s *Service) open() (ct *ctConn, lg *nflog.Conn, err error) {
	write := dataplane.WriteSysctls
	if s.cfg.SysctlRecord != "" {
		write = sysctlrecord.Writer(s.cfg.SysctlRecord)
	}
	open := func() error {
		if ct, err = listenConntrack(s.cfg.ReceiveBuffer); err != nil {
			return err
		}
		if lg, err = nflog.Listen(s.cfg.Group); err != nil {
			ct.close()
			return fmt.Errorf("flowcap: %w", err)
		}
		if err = loadConntrack(); err == nil {
			if err = write([]dataplane.Sysctl{AcctSysctl}); err != nil {
				err = fmt.Errorf("flowcap: conntrack counters: %w", err)
			}
		}
		if err != nil {
			ct.close()
			lg.Close()
		}
		return err
	}
	if s.cfg.NetNS != "" {
		err = netns.Do(s.cfg.NetNS, open)
	} else {
		err = open()
	}
	return ct, lg, err
}

// readConntrack turns the events into records until the socket closes.
func (s *Service) readConntrack(c *ctConn) error {
	for {
		evs, lost, err := c.receive()
		for range lost {
			s.lost(SourceConntrack)
		}
		if err != nil {
			return fmt.Errorf("flowcap: conntrack events: %w", err)
		}
		now := time.Now().UTC()
		for i := range evs {
			s.conntrackEvent(now, &evs[i])
		}
	}
}

func (s *Service) conntrackEvent(now time.Time, ev *conntrack.Event) {
	f := ev.Flow
	switch ev.Type {
	case conntrack.EventNew:
		rules := s.j.rules(ParseLabels(f.Labels))
		if rec, ok := s.j.join(now, flows.Start, f, rules); ok {
			s.rules.put(f.ID, rules)
			s.emit(rec)
		}
	case conntrack.EventDestroy:
		if rec, ok := s.j.join(now, flows.End, f, s.rules.take(f.ID)); ok {
			s.emit(rec)
		}
	}
}

// readNFLOG turns the drops into records until the socket closes.
func (s *Service) readNFLOG(c *nflog.Conn) error {
	for {
		recs, err := c.Receive()
		if errors.Is(err, nflog.ErrLost) {
			s.lost(SourceNFLOG)
			continue
		}
		if err != nil {
			return fmt.Errorf("flowcap: NFLOG group %d: %w", s.cfg.Group, err)
		}
		now := time.Now().UTC()
		for _, r := range recs {
			rec, k, ok := s.j.drop(now, r)
			if !ok {
				continue
			}
			s.foldMu.Lock()
			start, isNew, ended := s.fold.add(now, k, rec)
			s.foldMu.Unlock()
			s.emit(ended...)
			if isNew {
				s.emit(start)
			}
		}
	}
}

// expireBursts closes the bursts whose window ended, until ctx ends.
func (s *Service) expireBursts(ctx context.Context) {
	t := time.NewTicker(FoldWindow / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.foldMu.Lock()
			ended := s.fold.expire(now)
			s.foldMu.Unlock()
			s.emit(ended...)
		}
	}
}

func (s *Service) emit(recs ...flows.Record) {
	if len(recs) == 0 {
		return
	}
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	for _, r := range recs {
		s.cfg.Sink(r)
	}
}

func (s *Service) lost(source string) {
	if s.cfg.Lost != nil {
		s.cfg.Lost(source)
	}
}
