package abuse

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// heldPolls: Clients (3,200) long polls for a new bundle
// (GET /model/bundle?wait=30s with the current ETag), each on a
// connection of its own from its own port; a poll that is answered is
// sent again (a refused one after a second, as a careless client retries),
// for the Duration. Beside them the router flushes its samples, 100
// entries four times a second. Held polls without a bound took the
// trainer's descriptors: at the limit (3,000 under ulimit -n 3000), ingest
// p99 reached 11.7 s and an upload took 18 s, which the router, waiting
// 10 s and never retrying, loses (issue 26). The figures: the slowest
// ingest, held to 3 s, and ingest failures, held to none.
func heldPolls(ctx context.Context, c Config) (*Result, error) {
	addr, err := loopback("trainer URL", c.TrainerURL)
	if err != nil {
		return nil, err
	}
	clients := orDefault(c.Clients, 3200)
	etag, err := currentETag(c.TrainerURL, c.Token)
	if err != nil {
		return nil, err
	}
	var tag atomic.Pointer[string] // the newest ETag seen, as a predictor keeps its bundle's
	tag.Store(&etag)
	request := func() []byte {
		head := fmt.Sprintf("GET /model/bundle?wait=30s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", addr)
		if e := *tag.Load(); e != "" {
			head += "If-None-Match: " + e + "\r\n"
		}
		if c.Token != "" {
			head += "Authorization: Bearer " + c.Token + "\r\n"
		}
		return []byte(head + "\r\n")
	}
	fmt.Fprintf(c.Log, "held-polls: %d long polls on %s for %s, 100 samples ingested every 250 ms beside\n", clients, addr, c.Duration)

	r := &Result{Scenario: "held-polls", Counts: map[string]int{}}
	var mu sync.Mutex
	count := func(k string) { mu.Lock(); r.Counts[k]++; mu.Unlock() }
	var waiting, peak atomic.Int64
	ing := watched{p: ingest(c.TrainerURL, 4), max: 3000}
	err = alongside(ctx, c, c.TrainerURL, 0, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i := range clients {
			d := hostileDialer(c, addr, i)
			wg.Go(func() {
				// Spread the first connections over a second, as clients
				// starting together do.
				sleep(ctx, time.Duration(i)*time.Second/time.Duration(clients))
				for ctx.Err() == nil {
					status, newTag, err := longPoll(ctx, d, addr, request(), &waiting, &peak)
					if newTag != "" {
						tag.Store(&newTag)
					}
					switch {
					case ctx.Err() != nil:
					case err != nil:
						count("poll: " + errorKind(err))
						sleep(ctx, time.Second)
					case status == http.StatusNotModified || status == http.StatusOK:
						count("poll answered after its wait (" + strconv.Itoa(status) + ")")
					default:
						count("poll refused (" + strconv.Itoa(status) + ")")
						sleep(ctx, time.Second)
					}
				}
			})
		}
		wg.Wait()
	}, r, ing)
	r.add("polls waiting for an answer, peak", float64(peak.Load()), "")
	r.atMost("ingest calls failed", float64(ing.p.failed()), "", 0)
	return r, err
}

// longPoll sends req on a new connection and waits for its answer,
// counting itself in waiting meanwhile; it returns the answer's status and
// ETag.
func longPoll(ctx context.Context, d *net.Dialer, addr string, req []byte, waiting, peak *atomic.Int64) (int, string, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		return 0, "", err
	}
	n := waiting.Add(1)
	defer waiting.Add(-1)
	for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close() // the bundle itself is not needed: the connection closes
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

// currentETag is the ETag of the trainer's bundle, "" before the first.
func currentETag(trainerURL, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, trainerURL+"/model/bundle", nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client().Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Header.Get("ETag"), nil
	case http.StatusNotFound:
		return "", nil
	}
	return "", fmt.Errorf("GET %s/model/bundle: status %d", trainerURL, resp.StatusCode)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
