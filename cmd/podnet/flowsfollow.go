package main

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flows/flowapi"
)

// followFlows opens q on every agent, prints their snapshots merged by
// time, then every agent's new records as they come, until ctx ends or
// every stream has; it returns how many agents answered.
func followFlows(ctx context.Context, srcs []flowSource, q flowapi.Query, p *flowPrinter) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]*flowapi.Stream, len(srcs))
	snaps := make([][]flows.Record, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		if s.err != nil {
			errs[i] = s.err
			continue
		}
		wg.Go(func() { streams[i], snaps[i], errs[i] = openFollow(ctx, s.client, q) })
	}
	wg.Wait()
	answered := p.report(srcs, errs)
	for _, r := range mergeFlows(snaps, 0) {
		if p.record(r) != nil {
			return answered
		}
	}
	type item struct {
		src int
		rec flows.Record
		err error
	}
	live := make(chan item)
	for i, s := range streams {
		if s == nil {
			continue
		}
		wg.Go(func() {
			defer s.Close()
			for {
				rec, err := s.Next()
				select {
				case live <- item{i, rec, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(live) }()
	for it := range live {
		if it.err != nil {
			if ctx.Err() == nil {
				if errors.Is(it.err, io.EOF) {
					it.err = errors.New("the agent ended the stream")
				}
				p.failed(srcs[it.src].name, it.err)
			}
			continue
		}
		if p.record(it.rec) != nil {
			cancel()
		}
	}
	return answered
}

// openFollow opens the stream and reads its snapshot.
func openFollow(ctx context.Context, c *flowapi.Client, q flowapi.Query) (*flowapi.Stream, []flows.Record, error) {
	s, err := c.Open(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	var snap []flows.Record
	for range s.Snapshot {
		r, err := s.Next()
		if err != nil {
			s.Close()
			return nil, nil, err
		}
		snap = append(snap, r)
	}
	return s, snap, nil
}
