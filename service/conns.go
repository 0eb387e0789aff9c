package service

import (
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// connReserve is the descriptors a process keeps beyond its servers'
// connections: the store, bundle files, xgboost's pipes, logs, listeners,
// a predictor's connection to its trainer.
const connReserve = 64

// defaultMaxConns is the connections each of n servers may keep open: the
// process's descriptor limit (descriptorLimit), less connReserve, shared
// between them.
func defaultMaxConns(n int) int {
	return max(descriptorLimit()-connReserve, 16) / max(n, 1)
}

// connLimit keeps a server's open connections under max, so that the
// process never runs out of descriptors: at the limit the kernel refuses
// accept(2), and a server there takes no new connection at all, the
// router's sample uploads included (3,000 descriptors held by silent
// connections made a fresh upload wait 4 to 9 s; issue 26). When a new
// connection would pass max, the oldest one that is not serving a request
// (one that has sent no whole request yet, or sits idle between two) is
// closed to make room; a connection with a request in progress, a held
// long poll included, is never closed. With none to close, the new one is
// closed instead. A client that connects and sends its request at once,
// as every real one does, is served however many silent connections
// there are.
//
// Invariant, under mu: open holds every connection between StateNew and
// StateClosed (or StateHijacked); the list from head holds, oldest first,
// exactly those of them in StateNew or StateIdle.
type connLimit struct {
	max     int
	evicted prometheus.Counter
	gauge   prometheus.Gauge

	mu         sync.Mutex
	open       map[net.Conn]*connEntry
	closing    int // of open, those closed here whose close the server has not reported
	head, tail *connEntry
}

// connEntry is one open connection, linked into the list while it can be
// closed to make room.
type connEntry struct {
	conn       net.Conn
	prev, next *connEntry
	listed     bool
	closing    bool // closed to make room
}

func newConnLimit(max int, role string, reg prometheus.Registerer) *connLimit {
	l := &connLimit{max: max, open: map[net.Conn]*connEntry{},
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "headroom_connections_evicted_total",
			Help:        "Connections closed while not serving a request (silent, or idle between requests) to keep the open ones under --max-connections, or new ones refused there.",
			ConstLabels: prometheus.Labels{"role": role},
		}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "headroom_connections_open",
			Help:        "Connections the server has open (at most --max-connections).",
			ConstLabels: prometheus.Labels{"role": role},
		}),
	}
	reg.MustRegister(l.evicted, l.gauge)
	return l
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, s http.ConnState) {
	var victim net.Conn
	l.mu.Lock()
	e := l.open[c]
	switch s {
	case http.StateNew:
		if e == nil {
			e = &connEntry{conn: c}
			l.open[c] = e
		}
		l.push(e)
		if len(l.open)-l.closing > l.max {
			v := l.head // the oldest not serving a request: c itself at worst
			l.unlink(v)
			v.closing, victim = true, v.conn
			l.closing++
		}
	case http.StateIdle:
		if e != nil && !e.closing {
			l.push(e)
		}
	case http.StateActive:
		if e != nil {
			l.unlink(e)
		}
	case http.StateClosed, http.StateHijacked:
		if e != nil {
			l.unlink(e)
			delete(l.open, c)
			if e.closing {
				l.closing--
			}
		}
	}
	l.gauge.Set(float64(len(l.open)))
	l.mu.Unlock()
	if victim != nil {
		l.evicted.Inc()
		victim.Close() // the server then reports it closed
	}
}

// push puts e at the tail, the newest end. Called with mu held.
func (l *connLimit) push(e *connEntry) {
	l.unlink(e)
	e.prev, e.next, e.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

// unlink takes e off the list, if it is on it. Called with mu held.
func (l *connLimit) unlink(e *connEntry) {
	if !e.listed {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.listed = nil, nil, false
}
