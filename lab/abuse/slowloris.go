package abuse

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// slowloris: Clients (64) open connections, half to the predictor's
// /predict/bulk/strict and half to the trainer's ingest, declare a 2.5 MB
// body and send it a byte every 100 ms, reconnecting when cut off, for
// the Duration; beside them the router's hot path and its sample flushes.
// A server that waits for such bodies holds a goroutine and a buffer for
// each as long as they care to trickle. The figures: the slowest ingest
// (3 s), ingest failures (none), the predictor's RSS (128 MB), and the hot
// path's latency beside.
func slowloris(ctx context.Context, c Config) (*Result, error) {
	paddr, err := loopback("predictor URL", c.PredictorURL)
	if err != nil {
		return nil, err
	}
	taddr, err := loopback("trainer URL", c.TrainerURL)
	if err != nil {
		return nil, err
	}
	clients := orDefault(c.Clients, 64)
	const declared = 2_500_000
	targets := []struct{ addr, head string }{
		{paddr, requestHead("POST", "/predict/bulk/strict", paddr, c.Token, declared)},
		{taddr, requestHead("POST", "/add_training_data_bulk", taddr, c.Token, declared)},
	}
	fmt.Fprintf(c.Log, "slowloris: %d clients trickling %d-byte bodies a byte every 100 ms for %s\n", clients, declared, c.Duration)
	r := &Result{Scenario: "slowloris", Counts: map[string]int{}}
	var mu sync.Mutex
	count := func(k string) { mu.Lock(); r.Counts[k]++; mu.Unlock() }
	ing := watched{p: ingest(c.TrainerURL, 4), max: 3000}
	err = alongside(ctx, c, c.PredictorURL, 128, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i := range clients {
			t := targets[i%2]
			d := hostileDialer(c, t.addr, i/2)
			wg.Go(func() {
				for ctx.Err() == nil {
					status, err := trickle(ctx, d, t.addr, t.head)
					switch {
					case ctx.Err() != nil:
					case err != nil:
						count("hostile: " + errorKind(err))
						sleep(ctx, 100*time.Millisecond)
					default:
						count("hostile: cut off with " + strconv.Itoa(status))
					}
				}
			})
		}
		wg.Wait()
	}, r, hotPathBeside(c, 0), ing)
	r.atMost("ingest calls failed", float64(ing.p.failed()), "", 0)
	return r, err
}

// trickle sends head, then the body a byte every 100 ms until the server
// answers (or ctx ends), and returns the answer's status.
func trickle(ctx context.Context, d *net.Dialer, addr, head string) (int, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Write([]byte(head + `{"requests":[`)); err != nil {
		return 0, err
	}
	answer := make(chan int, 1)
	go func() {
		buf := make([]byte, 512)
		n, _ := conn.Read(buf)
		status := 0
		if n > 12 {
			status, _ = strconv.Atoi(string(buf[9:12]))
		}
		answer <- status
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case status := <-answer:
			return status, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				select {
				case status := <-answer:
					return status, nil
				case <-time.After(time.Second):
					return 0, err
				}
			}
		}
	}
}
