package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/podnet/podnet/ipam"
)

// Write implements ipam.Store: one request per write, conditional on the
// resourceVersion (ModRevision 0: POST, which fails if the object
// exists; N: PUT or DELETE with N, which fail if the object changed or is
// gone). AnyRevision reads the object first and writes at what it read.
func (s *Store) Write(ctx context.Context, w ipam.Write) (int64, error) {
	r, err := s.names.ref(w.Key)
	if err != nil {
		return 0, err
	}
	if w.ModRevision < ipam.AnyRevision {
		return 0, fmt.Errorf("kubernetes store: write %s at revision %d: invalid revision", w.Key, w.ModRevision)
	}
	switch {
	case w.Delete:
		return 0, s.delete(ctx, r, w.ModRevision)
	case w.ModRevision == 0:
		return s.create(ctx, r, w.Value)
	case w.ModRevision == ipam.AnyRevision:
		return s.putAny(ctx, r, w.Value)
	}
	return s.update(ctx, r, w.ModRevision, w.Value)
}

// body is the object to write: value as spec, labels derived from it,
// and rv ("" for none) as its resourceVersion.
func (s *Store) body(r ref, rv string, value []byte) ([]byte, error) {
	labels, err := s.names.labels(r, value)
	if err != nil {
		return nil, err
	}
	o := object{APIVersion: Group + "/" + Version, Kind: r.res.kind,
		Metadata: meta{Name: r.name, Labels: labels, ResourceVersion: rv}, Spec: value}
	return json.Marshal(o)
}

// resourceVersion is the resourceVersion a write at rev compares with:
// the string the server gave with rev. A rev this store did not hand out
// for r, or no longer remembers (see revisions), cannot be the object's
// current one as far as the store can tell: a conflict, which makes the
// allocator read the object again.
func (s *Store) resourceVersion(r ref, rev int64) (string, error) {
	rv, ok := s.revs.resourceVersion(r.String(), rev)
	if !ok {
		return "", fmt.Errorf("kubernetes store: %s: revision %d: not one this store read for it, or one it has forgotten: %w", r, rev, ipam.ErrConflict)
	}
	return rv, nil
}

// written returns the revision of the object a write answered with.
func (s *Store) written(ctx context.Context, r ref, c call, code int, body []byte) (int64, error) {
	if code != 200 && code != 201 {
		return 0, s.errorFor(ctx, apiError(c.op(), code, body))
	}
	kv, err := s.kv(r, body)
	if err != nil {
		return 0, err
	}
	return kv.ModRevision, nil
}

func (s *Store) create(ctx context.Context, r ref, value []byte) (int64, error) {
	b, err := s.body(r, "", value)
	if err != nil {
		return 0, err
	}
	c := call{method: "POST", path: r.res.plural, body: b}
	code, body, err := s.do(ctx, c)
	if err != nil {
		return 0, err
	}
	return s.written(ctx, r, call{method: "POST", path: r.String()}, code, body)
}

func (s *Store) update(ctx context.Context, r ref, rev int64, value []byte) (int64, error) {
	rv, err := s.resourceVersion(r, rev)
	if err != nil {
		return 0, err
	}
	b, err := s.body(r, rv, value)
	if err != nil {
		return 0, err
	}
	c := call{method: "PUT", path: r.res.plural + "/" + r.name, body: b}
	code, body, err := s.do(ctx, c)
	if err != nil {
		return 0, err
	}
	if code == 404 {
		// Gone since rev was read: the compare failed.
		return 0, fmt.Errorf("%w: %w", apiError(c.op(), code, body), ipam.ErrConflict)
	}
	return s.written(ctx, r, c, code, body)
}

// putAny writes value whatever the object's revision: read, then create
// or update at what was read, again while another writer gets between.
func (s *Store) putAny(ctx context.Context, r ref, value []byte) (int64, error) {
	for {
		kv, err := s.get(ctx, r)
		var rev int64
		switch {
		case errors.Is(err, ipam.ErrNotFound):
			rev, err = s.create(ctx, r, value)
		case err != nil:
			return 0, err
		default:
			rev, err = s.update(ctx, r, kv.ModRevision, value)
		}
		if !errors.Is(err, ipam.ErrConflict) {
			return rev, err
		}
		if ctx.Err() != nil {
			return 0, unavailable(ctx, err)
		}
	}
}

// deleteOptions is the body of a delete at a resourceVersion.
type deleteOptions struct {
	APIVersion    string `json:"apiVersion"`
	Kind          string `json:"kind"`
	Preconditions struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"preconditions"`
}

func (s *Store) delete(ctx context.Context, r ref, rev int64) error {
	if rev == 0 {
		// The key must not exist: deleting nothing.
		_, err := s.get(ctx, r)
		switch {
		case errors.Is(err, ipam.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("kubernetes store: delete %s if absent: it exists: %w", r, ipam.ErrConflict)
	}
	c := call{method: "DELETE", path: r.res.plural + "/" + r.name}
	if rev > 0 {
		rv, err := s.resourceVersion(r, rev)
		if err != nil {
			return err
		}
		o := deleteOptions{APIVersion: "v1", Kind: "DeleteOptions"}
		o.Preconditions.ResourceVersion = rv
		c.body, _ = json.Marshal(o)
	}
	code, body, err := s.do(ctx, c)
	switch {
	case err != nil:
		return err
	case code == 200 || code == 202:
		return nil
	case code == 404 && rev == ipam.AnyRevision:
		return nil
	case code == 404:
		return fmt.Errorf("%w: %w", apiError(c.op(), code, body), ipam.ErrConflict)
	}
	return s.errorFor(ctx, apiError(c.op(), code, body))
}
