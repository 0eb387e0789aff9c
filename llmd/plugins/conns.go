package plugins

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// A /predict/pairs call is on the scheduling path of every request, to a
// predictor beside the EPP. Through net/http's Transport one call is four
// goroutine hand-offs in the EPP (the caller to the connection's writer,
// the network to its reader, the reader to the caller, and back to the
// reader for the body), each a thread to wake when the cores are busy:
// twice the latency of the same exchange written and read by the caller
// itself, at the median and the tail, on a busy 2-core host. So calls to
// an http:// predictor reached without a proxy go over conns: plain
// HTTP/1.1 keep-alive connections that the calling goroutine writes and
// reads. Any other predictor URL goes through net/http.

// maxIdleConns is the idle connections kept per predictor: above the
// calls one EPP has in flight at once.
const maxIdleConns = 64

// dialTimeout bounds a new connection, within the call's own deadline.
const dialTimeout = 5 * time.Second

// conns are the connections to one predictor. Invariant: a connection is
// either in idle or held by exactly one call.
type conns struct {
	addr    string // host:port dialled
	request []byte // the request line and headers up to Content-Length's value
	dialer  net.Dialer

	mu   sync.Mutex
	idle []*conn // most recently used last
}

// conn is one connection and its reader.
type conn struct {
	net.Conn
	r *bufio.Reader
}

// newConns returns the connections for POST path on base, or nil when base
// is not a plain http:// URL that proxy (net/http's Transport.Proxy; nil:
// none) reaches directly.
func newConns(base, path string, proxy func(*http.Request) (*url.URL, error)) *conns {
	u, err := url.Parse(base + path)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Host == "" {
		return nil
	}
	if proxy != nil {
		if via, err := proxy(&http.Request{URL: u}); err != nil || via != nil {
			return nil
		}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	header := "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUser-Agent: headroom-epp\r\nContent-Type: application/json\r\nContent-Length: "
	return &conns{addr: addr, request: []byte(header), dialer: net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}}
}

// post sends body and appends the answer's body, at most limit bytes, to
// dst, returning its status. A connection the predictor closed while it was idle fails the
// first exchange on it before any answer: the call is then made once more
// on a new connection (a prediction is safe to repeat).
func (p *conns) post(ctx context.Context, body, dst []byte, limit int) (status int, data []byte, err error) {
	for {
		c, reused, err := p.get(ctx)
		if err != nil {
			return 0, dst, err
		}
		status, data, answered, keep, err := c.exchange(ctx, p.request, body, dst, limit)
		if err == nil && keep {
			p.put(c)
		} else {
			c.Close()
		}
		if err == nil || answered || !reused || ctx.Err() != nil {
			return status, data, callError(ctx, err)
		}
	}
}

// callError is err as the call's outcome: the context's error when the
// call ended because the context did.
func callError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

func (p *conns) get(ctx context.Context) (c *conn, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if c != nil {
		return c, true, nil
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	return &conn{Conn: nc, r: bufio.NewReaderSize(nc, connBuffer)}, false, nil
}

func (p *conns) put(c *conn) {
	p.mu.Lock()
	if len(p.idle) < maxIdleConns {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// exchange writes one request (header, then body's length and body, in one
// system call) and reads its answer, at most limit bytes of body, within
// ctx. answered says whether any
// of the answer arrived; keep whether the connection may serve another.
func (c *conn) exchange(ctx context.Context, header, body, dst []byte, limit int) (status int, data []byte, answered, keep bool, err error) {
	deadline, _ := ctx.Deadline() // none: the zero time, no deadline
	if err := c.SetDeadline(deadline); err != nil {
		return 0, dst, false, false, err
	}
	// The context ending interrupts the exchange; a connection it may have
	// interrupted after the exchange is not reused.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false
		}
	}()
	var length [24]byte
	head := append(strconv.AppendInt(length[:0], int64(len(body)), 10), "\r\n\r\n"...)
	bufs := net.Buffers{header, head, body}
	if _, err := bufs.WriteTo(c); err != nil {
		return 0, dst, false, false, err
	}
	if _, err := c.r.Peek(1); err != nil {
		return 0, dst, false, false, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, dst, true, false, err
	}
	data, err = readBody(resp, dst, limit)
	resp.Body.Close()
	if err != nil {
		return 0, data, true, false, err
	}
	return resp.StatusCode, data, true, !resp.Close, nil
}
