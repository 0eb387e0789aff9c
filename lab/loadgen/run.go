package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// distinctRows is how many rows the prebuilt prediction bodies cover
// (rounded up to whole requests, at least one request): enough to walk the
// whole shipped H200 trace, few enough that building them is instant.
const distinctRows = 8192

// maxBodyBytes bounds the prebuilt prediction bodies together.
const maxBodyBytes = 64 << 20

// maxResponseBytes bounds one response read; a 10,000-row answer is ~3 MB.
const maxResponseBytes = 256 << 20

// job is one request the pacer released.
type job struct {
	index    int64
	due      time.Time // start + index/rate
	released time.Time // when the pacer handed it to the workers
	measured bool      // due inside the measured window
}

// tally is what one worker saw; workers keep their own and they are merged
// at the end, so recording takes no lock.
type tally struct {
	latency Histogram // release → response read
	service Histogram // request sent → response read
	lag     Histogram // due → release: the pacer's own lateness
	ok      uint64
	units   uint64 // rows predicted, or samples acknowledged
	errs    map[string]uint64
	last    time.Time // latest completion of a measured request
	// timeline keeps each success's release time and latency, up to
	// timelineCap of them (0: none kept), for BusySummary.
	timeline    []timed
	timelineCap int
	truncated   bool
}

func newTally() *tally { return &tally{errs: map[string]uint64{}} }

// addDropped counts due requests the pacer could not queue.
func (t *tally) addDropped(n uint64) {
	if n > 0 {
		t.errs["backlog_full"] += n
	}
}

func (t *tally) merge(o *tally) {
	t.latency.Merge(&o.latency)
	t.service.Merge(&o.service)
	t.lag.Merge(&o.lag)
	t.ok += o.ok
	t.units += o.units
	for k, v := range o.errs {
		t.errs[k] += v
	}
	if o.last.After(t.last) {
		t.last = o.last
	}
	t.timeline = append(t.timeline, o.timeline...)
	t.truncated = t.truncated || o.truncated
}

// Run sends the configured load until the schedule is done or ctx ends, and
// summarises it. A cancelled ctx stops the schedule early; requests cut off
// by it are neither successes nor errors, and the summary says Interrupted.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:               nil, // never route a loopback test through an HTTP_PROXY
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Concurrency + cfg.IngestConcurrency + 2,
		MaxIdleConnsPerHost: cfg.Concurrency + cfg.IngestConcurrency + 2,
		IdleConnTimeout:     90 * time.Second,
	}
	defer transport.CloseIdleConnections()
	var rt http.RoundTripper = transport
	if cfg.Token != "" {
		rt = bearer{token: "Bearer " + cfg.Token, next: transport}
	}
	client := &http.Client{Transport: rt, Timeout: cfg.Timeout}

	var bodies [][]byte
	if cfg.Rate > 0 {
		bodies = predictBodies(cfg.Source, cfg.Rows)
	}

	var sc *scraper
	if cfg.ScrapeInterval > 0 {
		sc = newScraper(client, cfg.PredictorURL, cfg.TrainerURL, cfg.Path)
		sc.once(ctx)
	}

	// Start a little ahead so the workers are parked before the first due.
	start := time.Now().Add(5 * time.Millisecond)
	measureFrom := start.Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)

	var wg sync.WaitGroup
	predict, ingest := newTally(), newTally()
	if cfg.Rate > 0 {
		predict = stream{
			url: cfg.PredictorURL + cfg.Path, rate: cfg.Rate, workers: cfg.Concurrency,
			body: func(i int64, _ []byte) []byte { return bodies[i%int64(len(bodies))] },
			check: func(status int, resp []byte) (uint64, string) {
				return checkPrediction(status, resp, cfg.Rows)
			},
			timeline: sc != nil,
		}.start(ctx, &wg, cfg, client, start, measureFrom, end)
	}
	if cfg.IngestRate > 0 {
		ingest = stream{
			url: cfg.TrainerURL + "/add_training_data_bulk", rate: cfg.IngestRate / float64(cfg.IngestBatch),
			workers: cfg.IngestConcurrency,
			body: func(i int64, buf []byte) []byte {
				return AppendIngestBody(buf, cfg.Source, i*int64(cfg.IngestBatch), cfg.IngestBatch)
			},
			check: checkIngest,
		}.start(ctx, &wg, cfg, client, start, measureFrom, end)
	}

	// At the window's start: the client's CPU clock, and a scrape that
	// starts the servers' CPU clocks; then a scrape every interval.
	stopScrape := make(chan struct{})
	scrapeDone := make(chan struct{})
	var clientCPU0 time.Duration
	go func() {
		defer close(scrapeDone)
		select {
		case <-ctx.Done():
			return
		case <-stopScrape:
			return
		case <-time.After(time.Until(measureFrom)):
		}
		clientCPU0 = cpuTime()
		if sc != nil {
			sc.startWindow(ctx)
			sc.run(ctx, cfg.ScrapeInterval, stopScrape)
		}
	}()
	wg.Wait()
	close(stopScrape)
	<-scrapeDone
	clientCPU := cpuTime() - clientCPU0
	if sc != nil {
		sc.once(context.WithoutCancel(ctx)) // the state after the last request
	}

	s := &Summary{
		PredictorURL: cfg.PredictorURL, Path: cfg.Path, TargetRPS: cfg.Rate, Rows: cfg.Rows,
		Concurrency: cfg.Concurrency, DurationS: cfg.Duration.Seconds(), WarmupS: cfg.Warmup.Seconds(),
		Interrupted: ctx.Err() != nil,
	}
	window := measuredWindow(ctx, measureFrom, end, predict.last, ingest.last)
	if cfg.Rate > 0 {
		s.fillPredict(predict, window)
	}
	if clientCPU0 > 0 {
		s.ClientCPUSeconds = clientCPU.Seconds()
	}
	if cfg.IngestRate > 0 {
		s.Ingest = newIngestSummary(cfg, ingest, window)
	}
	if sc != nil {
		s.Server = sc.summary()
		if cfg.Rate > 0 {
			s.Busy = splitBusy(predict.timeline, sc.training, sc.loads, measureFrom, measureFrom.Add(window), predict.truncated)
		}
	}
	return s, nil
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not modify its request
	r.Header.Set("Authorization", b.token)
	return b.next.RoundTrip(r)
}

// backlog sizes the queue between pacer and workers: one second of load,
// at least a few per worker. Past it the server is so far behind that
// queueing more only measures the queue.
func backlog(rate float64, workers int) int {
	return max(int(rate), 4*workers, 16)
}

// measuredWindow is the time over which achieved rates are computed: the
// configured window, stretched to the last measured completion when the
// server lagged behind the schedule, or cut short by an interrupt.
func measuredWindow(ctx context.Context, from, end time.Time, lasts ...time.Time) time.Duration {
	stop := end
	if ctx.Err() != nil {
		stop = time.Now()
	}
	for _, l := range lasts {
		if l.After(stop) {
			stop = l
		}
	}
	return max(stop.Sub(from), time.Nanosecond)
}

// pace releases job i at start + i/rate until end or ctx ends, then closes
// jobs. It never waits for a worker: when the backlog is full the job is
// dropped, so a slow server cannot slow the schedule down; pace returns how
// many measured jobs it dropped. Timers on Linux fire about a millisecond
// late, so each wake releases every job that has come due, stamped with its
// release time.
func pace(ctx context.Context, start, measureFrom, end time.Time, rate float64, jobs chan<- job) (dropped uint64) {
	defer close(jobs)
	timer := time.NewTimer(time.Until(start))
	defer timer.Stop()
	for i := int64(0); ; {
		select {
		case <-ctx.Done():
			return dropped
		case <-timer.C:
		}
		now := time.Now()
		for {
			due := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
			if !due.Before(end) {
				return dropped
			}
			if due.After(now) {
				timer.Reset(due.Sub(now))
				break
			}
			j := job{index: i, due: due, released: now, measured: !due.Before(measureFrom)}
			select {
			case jobs <- j:
			default:
				if j.measured {
					dropped++
				}
			}
			i++
		}
	}
}

// record counts one finished request. check judges a response that came
// back; it returns the units done (rows, samples) or an error kind.
func (t *tally) record(ctx context.Context, j job, sent, done time.Time, err error, check func() (uint64, string)) {
	if !j.measured {
		return
	}
	if err != nil {
		if ctx.Err() != nil {
			return // cut off by the interrupt, not the server's fault
		}
		if d, ok := ctx.Deadline(); ok && !done.Before(d) {
			// The connection's deadline is the run's: it can fire a moment
			// before the context itself reports done. Same interrupt.
			return
		}
		t.errs[classify(err)]++
		return
	}
	units, kind := check()
	if kind != "" {
		t.errs[kind]++
		return
	}
	t.ok++
	t.units += units
	t.latency.Record(done.Sub(j.released))
	t.service.Record(done.Sub(sent))
	t.lag.Record(j.released.Sub(j.due))
	if t.timelineCap > 0 {
		if len(t.timeline) < t.timelineCap {
			t.timeline = append(t.timeline, timed{j.released.UnixNano(), done.Sub(j.released)})
		} else {
			t.truncated = true
		}
	}
	if done.After(t.last) {
		t.last = done
	}
}

// stream is one kind of request, sent open-loop at rate requests a second
// over workers connections to url.
type stream struct {
	url     string
	rate    float64
	workers int
	// body returns request i's body, building it into buf (empty, with
	// the capacity of earlier bodies) or returning one made in advance.
	body  func(i int64, buf []byte) []byte
	check func(status int, resp []byte) (units uint64, errKind string)
	// timeline keeps every success's time and latency (tally.timeline).
	timeline bool
}

// start paces s's requests from start to end, measuring those due from
// measureFrom, on goroutines added to wg. The returned tally is complete
// once wg is done.
func (s stream) start(ctx context.Context, wg *sync.WaitGroup, cfg Config, client *http.Client, start, measureFrom, end time.Time) *tally {
	total := newTally()
	var mu sync.Mutex // guards total until wg is done
	jobs := make(chan job, backlog(s.rate, s.workers))
	free := newRespBuffers(s.workers)
	for range s.workers {
		wg.Go(func() {
			t := newTally()
			if s.timeline {
				t.timelineCap = maxTimeline / s.workers
			}
			send := newSender(cfg, client, s.url, free)
			defer send.close()
			var buf []byte
			for j := range jobs {
				buf = s.body(j.index, buf[:0])
				status, resp, sent, err := send.post(ctx, buf)
				t.record(ctx, j, sent, time.Now(), err, func() (uint64, string) { return s.check(status, resp) })
				send.release()
			}
			mu.Lock()
			total.merge(t)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		dropped := pace(ctx, start, measureFrom, end, s.rate, jobs)
		mu.Lock()
		total.addDropped(dropped)
		mu.Unlock()
	})
	return total
}

// sender posts bodies to one URL for one worker, over a lean connection
// or Go's http.Client (Config.GoClient).
type sender struct {
	url     string
	client  *http.Client // nil: lean
	lean    *leanConn
	leanErr error
	free    respBuffers
	held    *bytes.Buffer // the buffer of the response being judged; nil between requests
}

// respBuffers is a free list of response buffers shared by the workers of
// one kind of request. When each worker kept a buffer of its own, at low
// rates of large responses (10,000 rows: ~4 MB) nearly every response
// landed in a buffer that had never held one, and the generator's page
// faults and zeroing were measured as server latency (p50 58 against 38 ms
// with 36 workers).
type respBuffers chan *bytes.Buffer

func newRespBuffers(n int) respBuffers { return make(respBuffers, n) }

func (f respBuffers) get() *bytes.Buffer {
	select {
	case b := <-f:
		return b
	default:
		return new(bytes.Buffer)
	}
}

func (f respBuffers) put(b *bytes.Buffer) {
	select {
	case f <- b:
	default:
	}
}

func newSender(cfg Config, client *http.Client, url string, free respBuffers) *sender {
	s := &sender{url: url, free: free}
	if cfg.GoClient {
		s.client = client
	} else {
		s.lean, s.leanErr = newLeanConn(url, cfg.Token, cfg.Timeout)
	}
	return s
}

// post sends body and returns the response, which stays valid until
// release.
func (s *sender) post(ctx context.Context, body []byte) (status int, resp []byte, sent time.Time, err error) {
	if s.held == nil {
		s.held = s.free.get()
	}
	if s.client != nil {
		return post(ctx, s.client, s.url, body, s.held)
	}
	if s.leanErr != nil {
		return 0, nil, time.Now(), s.leanErr
	}
	status, sent, err = s.lean.post(ctx, body, s.held)
	return status, s.held.Bytes(), sent, err
}

// release gives the last response's buffer back to the free list.
func (s *sender) release() {
	if s.held != nil {
		s.free.put(s.held)
		s.held = nil
	}
}

func (s *sender) close() {
	if s.lean != nil {
		s.lean.close()
	}
}

// post sends body with client and reads the whole response into buf.
func post(ctx context.Context, client *http.Client, url string, body []byte, buf *bytes.Buffer) (status int, resp []byte, sent time.Time, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, time.Now(), err
	}
	req.Header.Set("Content-Type", "application/json")
	sent = time.Now()
	r, err := client.Do(req)
	if err != nil {
		return 0, nil, sent, err
	}
	defer r.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, maxResponseBytes)); err != nil {
		return 0, nil, sent, err
	}
	return r.StatusCode, buf.Bytes(), sent, nil
}

var ttftKey = []byte(`"ttft_ms":`)

// checkPrediction accepts exactly 200 with one prediction per row (spec
// docs/PROTOCOL.md §1: anything else fails every coalesced caller of the router).
func checkPrediction(status int, body []byte, rows int) (uint64, string) {
	if status != http.StatusOK {
		return 0, "status_" + strconv.Itoa(status)
	}
	if bytes.Count(body, ttftKey) != rows {
		return 0, "bad_response"
	}
	return uint64(rows), ""
}

var acceptedKey = []byte(`"accepted":`)

// checkIngest accepts exactly 202 and returns the samples the trainer says
// it stored durably.
func checkIngest(status int, body []byte) (uint64, string) {
	if status != http.StatusAccepted {
		return 0, "status_" + strconv.Itoa(status)
	}
	i := bytes.Index(body, acceptedKey)
	if i < 0 {
		return 0, "bad_response"
	}
	rest := body[i+len(acceptedKey):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return 0, "bad_response"
	}
	return v, ""
}

// classify names a transport failure.
func classify(err error) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &oe) && oe.Op == "dial":
		return "connect"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_reset"
	}
	return "transport"
}

// predictBodies builds the request bodies the prediction workers cycle
// through: request i sends body i mod len.
func predictBodies(src Source, rows int) [][]byte {
	n := max(1, (distinctRows+rows-1)/rows)
	bodies := make([][]byte, 0, n)
	total := 0
	for k := range n {
		b := AppendPredictBody(nil, src, int64(k)*int64(rows), rows)
		bodies = append(bodies, b)
		if total += len(b); total > maxBodyBytes {
			break
		}
	}
	return bodies
}
