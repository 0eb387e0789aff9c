package abuse

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/headroomhq/headroom/lab/loadgen"
)

// slowReaders: Clients (40) post Rows-row (10,000) /predict/bulk requests
// and read each answer at ReadRate (256 KiB/s) through a 4 KB receive
// buffer, again and again for the Duration, beside the router's hot path.
// A server that builds every answer whole and holds it until the client
// has read it holds them all at once: 40 such clients took a predictor
// from 28 to 267 MB, past its 256 Mi limit (issue 26). The figure is the
// predictor's peak RSS, held to 128 MB.
func slowReaders(ctx context.Context, c Config) (*Result, error) {
	addr, err := loopback("predictor URL", c.PredictorURL)
	if err != nil {
		return nil, err
	}
	clients, rows, rate := orDefault(c.Clients, 40), orDefault(c.Rows, 10000), orDefault(c.ReadRate, 256<<10)
	body := loadgen.AppendPredictBody(nil, loadgen.Generator{Seed: 3}, 0, rows)
	req := []byte(requestHead("POST", "/predict/bulk", addr, c.Token, len(body)) + string(body))
	fmt.Fprintf(c.Log, "slow-readers: %d clients, %d rows (%d bytes) a request, reading at %d bytes/s, for %s\n",
		clients, rows, len(body), rate, c.Duration)

	r := &Result{Scenario: "slow-readers", Counts: map[string]int{}}
	var mu sync.Mutex
	count := func(k string) { mu.Lock(); r.Counts[k]++; mu.Unlock() }
	err = alongside(ctx, c, c.PredictorURL, 128, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i := range clients {
			d := hostileDialer(c, addr, i)
			wg.Go(func() {
				for ctx.Err() == nil {
					status, err := slowRead(ctx, d, addr, req, rate)
					switch {
					case err != nil && ctx.Err() != nil:
					case err != nil:
						count("hostile: " + errorKind(err))
					default:
						count("hostile: status " + strconv.Itoa(status))
					}
				}
			})
		}
		wg.Wait()
	}, r, hotPathBeside(c, 0))
	return r, err
}

// watched is a probe run beside the hostile clients, with the bounds its
// p99 and its slowest call are held to, in ms (0: none).
type watched struct {
	p        *probe
	p99, max float64
}

// alongside runs hostile for c.Duration beside the probes and an RSS
// sampler of the server at rssOf, and reports them all: the peak RSS held
// to rssBound MB (0: no bound).
func alongside(ctx context.Context, c Config, rssOf string, rssBound float64, hostile func(context.Context), r *Result, probes ...watched) error {
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	hc := client()
	before, err := scrapeRSS(hc, rssOf, c.Token)
	if err != nil {
		return fmt.Errorf("RSS before the run: %w", err)
	}
	rss := &rssSampler{url: rssOf}
	var wg sync.WaitGroup
	wg.Go(func() { rss.run(ctx, hc, c.Token, 100*time.Millisecond) })
	for _, w := range probes {
		wg.Go(func() { w.p.run(ctx, hc, c.Token) })
	}
	hostile(ctx)
	cancel()
	wg.Wait()
	if rss.samples == 0 {
		return fmt.Errorf("%s/metrics never answered: no RSS measured", rssOf)
	}
	r.add("RSS before", mb(before), "MB")
	if rssBound > 0 {
		r.atMost("RSS peak", mb(rss.max), "MB", rssBound)
	} else {
		r.add("RSS peak", mb(rss.max), "MB")
	}
	for _, w := range probes {
		w.p.report(r, w.p99, w.max)
	}
	return nil
}

// hotPathBeside is the router's hot path at c.ProbeRate (50 a second),
// its p99 held to p99 ms (0: reported only).
func hotPathBeside(c Config, p99 float64) watched {
	return watched{p: hotPath(c.PredictorURL, orDefault(c.ProbeRate, 50)), p99: p99}
}

// requestHead is an HTTP/1.1 request head asking the server to close the
// connection after its answer, so that reading to EOF reads one answer.
func requestHead(method, path, host, token string, contentLength int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, path, host)
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", contentLength)
	}
	if token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	b.WriteString("\r\n")
	return b.String()
}

// slowRead sends req on a new connection with a small receive buffer and
// reads the answer at rate bytes a second, returning its status.
func slowRead(ctx context.Context, d *net.Dialer, addr string, req []byte, rate int) (int, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096) // the kernel holds little for us: the server holds the rest
	}
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	start := time.Now()
	br := bufio.NewReaderSize(conn, 4096)
	status, err := readStatus(br)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 4096)
	read := 0
	for {
		n, err := br.Read(buf)
		read += n
		if err == io.EOF {
			return status, nil
		}
		if err != nil {
			return status, err
		}
		if ahead := time.Duration(float64(read)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
			select {
			case <-ctx.Done():
				return status, ctx.Err()
			case <-time.After(ahead):
			}
		}
	}
}

// readStatus reads an HTTP status line and returns its code.
func readStatus(br *bufio.Reader) (int, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, err
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	return strconv.Atoi(f[1])
}

// errorKind names an error for counting: "reset", "refused", "timeout",
// "eof", or "error".
func errorKind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "reset"):
		return "reset"
	case strings.Contains(s, "refused"):
		return "refused"
	case strings.Contains(s, "timeout"):
		return "timeout"
	case strings.Contains(s, "EOF"):
		return "eof"
	case strings.Contains(s, "too many open files"):
		return "descriptors"
	}
	return "error"
}
