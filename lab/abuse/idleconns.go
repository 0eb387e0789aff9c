package abuse

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// idleConns: Clients (3,200) connections to the trainer that send
// nothing, each opened again when the server closes it, for the Duration,
// beside the router's sample flushes: the descriptors held long polls
// took, taken without a request. The figures: the slowest ingest (3 s)
// and ingest failures (none).
func idleConns(ctx context.Context, c Config) (*Result, error) {
	addr, err := loopback("trainer URL", c.TrainerURL)
	if err != nil {
		return nil, err
	}
	clients := orDefault(c.Clients, 3200)
	fmt.Fprintf(c.Log, "idle-conns: %d silent connections to %s for %s, 100 samples ingested every 250 ms beside\n", clients, addr, c.Duration)
	r := &Result{Scenario: "idle-conns", Counts: map[string]int{}}
	var mu sync.Mutex
	count := func(k string) { mu.Lock(); r.Counts[k]++; mu.Unlock() }
	ing := watched{p: ingest(c.TrainerURL, 4), max: 3000}
	err = alongside(ctx, c, c.TrainerURL, 0, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i := range clients {
			d := hostileDialer(c, addr, i)
			wg.Go(func() {
				sleep(ctx, time.Duration(i)*time.Second/time.Duration(clients))
				for ctx.Err() == nil {
					start := time.Now()
					err := silent(ctx, d, addr)
					switch {
					case ctx.Err() != nil:
					case err != nil:
						count("hostile: " + errorKind(err))
						sleep(ctx, time.Second)
					default:
						count(fmt.Sprintf("hostile: closed by the server after %.0f s", time.Since(start).Seconds()))
					}
				}
			})
		}
		wg.Wait()
	}, r, ing)
	r.atMost("ingest calls failed", float64(ing.p.failed()), "", 0)
	return r, err
}

// silent opens a connection to addr and waits, sending nothing, until the
// server closes it.
func silent(ctx context.Context, d *net.Dialer, addr string) error {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_, err = io.Copy(io.Discard, conn)
	return err
}
