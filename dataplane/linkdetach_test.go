package dataplane

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/podnet/podnet/netns"
)

// The child deletes the pair in the caller's namespace, holds the kept
// descriptor until the kernel is done, and holds nothing else: a pipe
// of the caller's parent kept open by it would keep a CNI runtime
// waiting.
func TestDeleteLinkDetached(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh := handleIn(t, host)
	name := HostVethName("detached", "eth0")
	if _, err := CreateVeth(hh, Veth{HostName: name, PeerName: "eth0", PeerNSFd: nsFd(t, ctr)}); err != nil {
		t.Fatal(err)
	}
	keptR, keptW := pipe(t)
	otherR, otherW := pipe(t)
	var done <-chan error
	err := netns.Do(host, func() (err error) { done, err = DeleteLinkDetached(hh, name, int(keptW.Fd())); return err })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l, err := LinkByName(handleIn(t, host), name); l != nil || err != nil {
		t.Fatalf("link still listed once unregistered: %v %v", l, err)
	}
	if l, _ := LinkByName(handleIn(t, ctr), "eth0"); l != nil {
		t.Fatal("peer survived")
	}
	keptW.Close()
	otherW.Close()
	eof(t, otherR, "a descriptor not kept")
	eof(t, keptR, "the kept descriptor (the child never ended?)")

	err = netns.Do(host, func() (err error) { done, err = DeleteLinkDetached(hh, name, -1); return err })
	if err != nil || <-done != nil {
		t.Fatalf("deleting a missing link: %v", err)
	}
}

// Without the notice, the child's exit reports; a child that answered
// "no such device" would then leave the link in place, so the link
// being gone says the child deleted it in the caller's namespace.
func TestDeleteLinkDetachedWithoutNotice(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh := handleIn(t, host)
	linkWatch = func(int) (*unregisterWatch, error) {
		r, _, err := os.Pipe() // never readable: no notice
		return &unregisterWatch{f: r, gone: make(chan struct{})}, err
	}
	t.Cleanup(func() { linkWatch = watchUnregister })
	name := HostVethName("nonotice", "eth0")
	if _, err := CreateVeth(hh, Veth{HostName: name, PeerName: "eth0", PeerNSFd: nsFd(t, ctr)}); err != nil {
		t.Fatal(err)
	}
	var done <-chan error
	err := netns.Do(host, func() (err error) { done, err = DeleteLinkDetached(hh, name, -1); return err })
	if err != nil || <-done != nil {
		t.Fatalf("deletion without the notice: %v", err)
	}
	if l, _ := LinkByName(hh, name); l != nil {
		t.Fatal("link still there: the child did not delete it")
	}
	// lo cannot be deleted: the kernel refuses the child, and then this
	// process, which reports it.
	err = netns.Do(host, func() (err error) { done, err = DeleteLinkDetached(hh, "lo", -1); return err })
	if err == nil {
		err = <-done
	}
	if err == nil {
		t.Fatal("a refused deletion reported no error")
	}
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// eof waits for r's end: every write end closed.
func eof(t *testing.T, r *os.File, what string) {
	t.Helper()
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		// A pipe from os.Pipe is pollable; without a deadline the test
		// would hang rather than fail.
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: still open (%v)", what, err)
	}
}
