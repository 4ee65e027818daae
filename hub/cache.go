package hub

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// cache keeps encoded chunks, at most max bytes, the least recently used
// evicted first; a chunk being encoded is waited for, not encoded again.
type cache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[string]*list.Element // of *centry
	lru   list.List                // front: most recent
	hits  atomic.Int64             // gets answered by an entry already there
}

type centry struct {
	key     string
	version uint64
	ready   chan struct{}
	frames  []byte
	err     error
}

func newCache(max int64) *cache { return &cache{max: max, m: map[string]*list.Element{}} }

// get returns the frames of key (of version v): the cache's, those being
// encoded for another request (waited for), or encode's. A request that
// waited for an encoding that failed encodes once itself: the failure may
// have been the other request's own (its context ended while it waited
// for the memory budget, say).
func (c *cache) get(v uint64, key string, encode func() ([]byte, error)) ([]byte, error) {
	return c.getOnce(v, key, encode, true)
}

func (c *cache) getOnce(v uint64, key string, encode func() ([]byte, error), retry bool) ([]byte, error) {
	if c.max == 0 {
		return encode()
	}
	c.mu.Lock()
	if el, ok := c.m[key]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*centry)
		c.mu.Unlock()
		c.hits.Add(1)
		<-e.ready
		if e.err != nil && retry {
			return c.getOnce(v, key, encode, false)
		}
		return e.frames, e.err
	}
	e := &centry{key: key, version: v, ready: make(chan struct{})}
	c.m[key] = c.lru.PushFront(e)
	c.mu.Unlock()
	e.frames, e.err = encode()
	close(e.ready)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil {
		c.remove(key)
		return nil, e.err
	}
	if el, ok := c.m[key]; ok && el.Value.(*centry) == e {
		c.bytes += int64(len(e.frames))
		for c.bytes > c.max && c.lru.Len() > 1 {
			old := c.lru.Back().Value.(*centry)
			if old == e {
				break
			}
			c.remove(old.key)
		}
	}
	return e.frames, nil
}

// remove drops key (under mu).
func (c *cache) remove(key string) {
	el, ok := c.m[key]
	if !ok {
		return
	}
	e := el.Value.(*centry)
	select {
	case <-e.ready:
		c.bytes -= int64(len(e.frames))
	default: // being encoded: not counted yet
	}
	c.lru.Remove(el)
	delete(c.m, key)
}

// dropVersion drops the chunks of version v.
func (c *cache) dropVersion(v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, el := range c.m {
		if el.Value.(*centry).version == v {
			c.remove(key)
		}
	}
}
