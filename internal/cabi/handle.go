package cabi

import (
	"fmt"
	"sync"
)

// handles is the table of objects that live across calls. IDs start at 1
// and are never reused within a process, so a stale ID is refused with
// EHANDLE rather than reaching another object.
var handles = struct {
	sync.Mutex
	next uint64
	m    map[uint64]any
}{m: make(map[uint64]any)}

// newHandle stores v and returns its ID.
func newHandle(v any) uint64 {
	handles.Lock()
	defer handles.Unlock()
	handles.next++
	handles.m[handles.next] = v
	return handles.next
}

// lookup returns the object of handle h when it is a T.
func lookup[T any](h uint64, kind string) (T, error) {
	handles.Lock()
	v, ok := handles.m[h]
	handles.Unlock()
	t, isT := v.(T)
	if !ok {
		return t, codeErrorf(EHANDLE, "tensorpress: no %s with handle %d (closed?)", kind, h)
	}
	if !isT {
		return t, codeErrorf(EHANDLE, "tensorpress: handle %d is a %s, not a %s", h, kindOf(v), kind)
	}
	return t, nil
}

// remove deletes h and returns what it held.
func remove(h uint64) (any, bool) {
	handles.Lock()
	defer handles.Unlock()
	v, ok := handles.m[h]
	delete(handles.m, h)
	return v, ok
}

func kindOf(v any) string {
	switch v.(type) {
	case *profileObj:
		return "profile"
	case *sender:
		return "sender"
	case *receiver:
		return "receiver"
	case []byte:
		return "spilled output"
	case *hubConn:
		return "hub"
	}
	return fmt.Sprintf("%T", v)
}

// LiveHandles is the number of objects in the handle table.
func LiveHandles() int64 {
	handles.Lock()
	defer handles.Unlock()
	return int64(len(handles.m))
}

// Close releases the object of handle h, whatever its kind: a Sender's
// Outbox is closed (pending updates aborted), a hub's connection closed,
// the others are dropped.
func Close(h uint64) (code int32, msg string) {
	defer guard(&code, &msg)
	v, ok := remove(h)
	if !ok {
		return fail(codeErrorf(EHANDLE, "tensorpress: no object with handle %d (closed twice?)", h))
	}
	if hc, ok := v.(*hubConn); ok {
		if err := hc.conn.Close(); err != nil {
			return fail(err)
		}
	}
	if s, ok := v.(*sender); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.ob.Close(); err != nil {
			return fail(err)
		}
	}
	return OK, ""
}
