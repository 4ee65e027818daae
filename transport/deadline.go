package transport

import (
	"sync"
	"time"
)

// deadline is a settable point in time as a channel that is closed once
// the time has passed, so that blocking selects can wait on it.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
}

func makeDeadline() deadline { return deadline{ch: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.ch // the timer fired: wait until its function closed ch
	}
	d.timer = nil
	passed := isClosed(d.ch)
	if t.IsZero() {
		if passed {
			d.ch = make(chan struct{})
		}
		return
	}
	if wait := time.Until(t); wait > 0 {
		if passed {
			d.ch = make(chan struct{})
		}
		ch := d.ch
		d.timer = time.AfterFunc(wait, func() { close(ch) })
		return
	}
	if !passed {
		close(d.ch)
	}
}

// wait returns a channel closed when the deadline passes.
func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
