package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// A load generator on the same two cores as the server takes CPU from it,
// and Go's http.Client spends about 60-80 µs of CPU per request here (a
// goroutine hand-off each way per request, header maps, a context per
// call). leanConn speaks just the HTTP/1.1 a load run needs, on one
// keep-alive connection per worker, for a fraction of that; the server
// receives the same request line, headers and body as from net/http.
// Config.GoClient switches back to net/http, the router's own client.

// leanConn is one keep-alive HTTP/1.1 connection to one host, used by one
// goroutine.
type leanConn struct {
	addr    string // host:port to dial
	header  []byte // request head up to the Content-Length value
	timeout time.Duration

	c    net.Conn
	r    *bufio.Reader
	used bool // a request has completed on c: the server may have closed it since

	head []byte // scratch for the request head
}

// newLeanConn prepares POSTs of JSON to target (scheme://host[:port]/path).
func newLeanConn(target, token string, timeout time.Duration) (*leanConn, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%s: the lean client speaks plain http only; use the Go client for %s", target, u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	path := u.RequestURI()
	var h bytes.Buffer
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: headroom-loadgen\r\nContent-Type: application/json\r\n", path, u.Host)
	if token != "" {
		fmt.Fprintf(&h, "Authorization: Bearer %s\r\n", token)
	}
	h.WriteString("Content-Length: ")
	return &leanConn{addr: addr, header: h.Bytes(), timeout: timeout}, nil
}

func (lc *leanConn) close() {
	if lc.c != nil {
		lc.c.Close()
		lc.c, lc.used = nil, false
	}
}

// post sends body and reads the response body into resp. On any error the
// connection is closed; the next call dials again. A reused connection
// that the server closed while idle (EOF before any byte of a response) is
// redialled once, as net/http does.
func (lc *leanConn) post(ctx context.Context, body []byte, resp *bytes.Buffer) (status int, sent time.Time, err error) {
	for attempt := 0; ; attempt++ {
		reused := lc.used
		sent = time.Now()
		status, err = lc.roundTrip(ctx, body, resp, sent)
		if err == nil {
			return status, sent, nil
		}
		lc.close()
		if !reused || attempt > 0 || !errors.Is(err, errIdleClosed) {
			return 0, sent, err
		}
	}
}

// errIdleClosed marks a connection closed before any response byte.
var errIdleClosed = fmt.Errorf("connection closed before the response: %w", io.EOF)

func (lc *leanConn) roundTrip(ctx context.Context, body []byte, resp *bytes.Buffer, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	deadline := now.Add(lc.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if lc.c == nil {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, "tcp", lc.addr)
		if err != nil {
			return 0, err
		}
		lc.c = c
		if lc.r == nil {
			lc.r = bufio.NewReaderSize(c, 64<<10)
		} else {
			lc.r.Reset(c)
		}
	}
	if err := lc.c.SetDeadline(deadline); err != nil {
		return 0, err
	}
	lc.head = append(append(lc.head[:0], lc.header...), strconv.Itoa(len(body))...)
	lc.head = append(lc.head, "\r\n\r\n"...)
	bufs := net.Buffers{lc.head, body} // one writev, no copy of the body
	if _, err := bufs.WriteTo(lc.c); err != nil {
		return 0, err
	}
	status, length, chunked, closeAfter, err := lc.readHead()
	if err != nil {
		return 0, err
	}
	resp.Reset()
	switch {
	case chunked:
		err = readChunked(lc.r, resp)
	case length >= 0:
		if length > maxResponseBytes {
			return 0, fmt.Errorf("response of %d bytes", length)
		}
		resp.Grow(int(length))
		_, err = io.CopyN(resp, lc.r, length)
	default: // no length: the body runs to the end of the connection
		_, err = resp.ReadFrom(io.LimitReader(lc.r, maxResponseBytes))
		closeAfter = true
	}
	if err != nil {
		return 0, err
	}
	if closeAfter {
		lc.close()
	} else {
		lc.used = true
	}
	return status, nil
}

// readHead reads the status line and headers, skipping 1xx responses.
func (lc *leanConn) readHead() (status int, length int64, chunked, closeAfter bool, err error) {
	for first := true; ; first = false {
		line, err := lc.r.ReadSlice('\n')
		if err != nil {
			if first && len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)) {
				return 0, 0, false, false, errIdleClosed
			}
			return 0, 0, false, false, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return 0, 0, false, false, fmt.Errorf("malformed status line %q", bytes.TrimSpace(line))
		}
		status, err = strconv.Atoi(string(line[9:12]))
		if err != nil {
			return 0, 0, false, false, fmt.Errorf("malformed status line %q", bytes.TrimSpace(line))
		}
		length, chunked, closeAfter = -1, false, line[7] == '0' // HTTP/1.0 closes by default
		for {
			h, err := lc.r.ReadSlice('\n')
			if err != nil {
				return 0, 0, false, false, err
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, 0, false, false, fmt.Errorf("malformed header %q", h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case asciiEqualFold(name, "Content-Length"):
				if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
					return 0, 0, false, false, fmt.Errorf("bad Content-Length %q", value)
				}
			case asciiEqualFold(name, "Transfer-Encoding"):
				chunked = asciiEqualFold(value, "chunked")
			case asciiEqualFold(name, "Connection"):
				closeAfter = asciiEqualFold(value, "close")
			}
		}
		if status >= 200 {
			return status, length, chunked, closeAfter, nil
		}
	}
}

// readChunked reads a chunked body (RFC 9112 §7.1) into dst, ignoring
// chunk extensions and trailers.
func readChunked(r *bufio.Reader, dst *bytes.Buffer) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, then the empty line
				t, err := r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if int64(dst.Len())+n > maxResponseBytes {
			return fmt.Errorf("response over %d bytes", maxResponseBytes)
		}
		if _, err := io.CopyN(dst, r, n); err != nil {
			return err
		}
		if _, err := r.Discard(2); err != nil { // the chunk's CRLF
			return err
		}
	}
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
