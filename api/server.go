// Package api is Headroom's HTTP surface: llm-d's wire contract for the
// trainer and the predictor, plus Headroom's own routes. Handlers are thin:
// decoding, validation and encoding are package wire's, everything else
// lives in store, trainer and predictor.
package api

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/headroomhq/headroom/internal/admission"
	"github.com/headroomhq/headroom/internal/bufpool"
	"github.com/headroomhq/headroom/internal/httpmetrics"
	"github.com/headroomhq/headroom/wire"
)

// Limits bound what one request may ask for.
type Limits struct {
	MaxBodyBytes int64 // default 64 MiB
	MaxRows      int   // rows per prediction request, default 10,000
	MaxEntries   int   // entries per ingest request, default 100,000
	// MaxPairCandidates is the most prefill, and the most decode,
	// candidates one /predict/pairs request may name; default
	// wire.DefaultMaxPairCandidates. MaxPairs (default DefaultMaxPairs)
	// is the most pairs, prefill × decode, it may rank.
	MaxPairCandidates int
	MaxPairs          int
	// A request body must arrive at MinBodyRate bytes a second on average
	// once BodyGrace has passed since its reading began (defaults 64 KiB/s
	// and 5 s): a 64 MiB body has 17 minutes, a 1 MB body 20 s, a body
	// trickling a byte a second 5 s. Slower, the connection is cut and
	// the request answered 408.
	MinBodyRate float64
	BodyGrace   time.Duration
}

func (l *Limits) setDefaults() {
	if !(l.MinBodyRate > 0) {
		l.MinBodyRate = 64 << 10
	}
	if l.BodyGrace <= 0 {
		l.BodyGrace = 5 * time.Second
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 64 << 20
	}
	if l.MaxRows <= 0 {
		l.MaxRows = 10000
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 100000
	}
	if l.MaxPairCandidates <= 0 {
		l.MaxPairCandidates = wire.DefaultMaxPairCandidates
	}
	if l.MaxPairs <= 0 {
		l.MaxPairs = DefaultMaxPairs
	}
}

// Tokens are optional bearer tokens. Router-facing reads (predictions, model
// info) need Read when it is set; writes (ingest, flush, reload) need Write.
// Health, readiness and the root stay open for the kubelet.
type Tokens struct {
	Read  string
	Write string
}

// access classifies a route for Tokens.
type access int

const (
	open access = iota
	readAccess
	writeAccess
)

// requireToken rejects requests without the token of their class. The
// comparison takes constant time so a token cannot be guessed byte by byte
// from response timings. The write token also grants read access.
func requireToken(tokens Tokens, a access) gin.HandlerFunc {
	return func(c *gin.Context) {
		want := tokens.Read
		if a == writeAccess {
			want = tokens.Write
		}
		if a == open || want == "" {
			return
		}
		got, bearer := bearerToken(c.GetHeader("Authorization"))
		ok := bearer && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
		if !ok && bearer && a == readAccess && tokens.Write != "" {
			ok = subtle.ConstantTimeCompare([]byte(got), []byte(tokens.Write)) == 1
		}
		if !ok {
			c.Header("WWW-Authenticate", `Bearer realm="headroom"`)
			writeDetail(c, http.StatusUnauthorized, "missing or wrong bearer token")
			c.Abort()
		}
	}
}

// bearerToken is the credential of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110 §11.1, RFC 6750 §2.1);
// ok is false for any other header, a bare token included, which no client
// following the scheme sends and which must not pass for one.
func bearerToken(header string) (token string, ok bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// newEngine returns a gin engine with the reference's 404 and 405 bodies,
// panic recovery, and per-route metrics. It runs in gin's release mode:
// debug mode writes every route and a warning to stdout as the engine is
// built, where the service's own logs (slog) say what matters. The mode is
// gin's process-wide setting, stored atomically; every engine here wants
// the same, so setting it on each build is idempotent and race-free.
func newEngine(m *httpmetrics.Metrics) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.Use(m.Middleware(), gin.CustomRecovery(func(c *gin.Context, err any) {
		writeDetail(c, http.StatusInternalServerError, fmt.Sprintf("internal error: %v", err))
	}))
	r.NoRoute(func(c *gin.Context) { writeDetail(c, http.StatusNotFound, "Not Found") })
	r.NoMethod(func(c *gin.Context) { writeDetail(c, http.StatusMethodNotAllowed, "Method Not Allowed") })
	return r
}

// writeDetail answers {"detail": "<msg>"}, the reference's error shape for
// handler errors.
func writeDetail(c *gin.Context, status int, msg string) {
	c.JSON(status, wire.Detail{Detail: msg})
}

// writeValidation answers 422 {"detail": [...]}.
func writeValidation(c *gin.Context, errs []wire.FieldError) {
	c.JSON(http.StatusUnprocessableEntity, wire.Detail{Detail: errs})
}

// errBodyTooLarge is returned by readBody past the limit.
var errBodyTooLarge = errors.New("request body too large")

// bodyPool recycles request body buffers. Bodies past 256 KB (a
// 1,000-row prediction request) are large: one is kept aside through
// garbage collections, so a stream of large requests does not allocate
// and zero a new buffer each (see bufpool.Pool); none past 8 MB is kept.
var bodyPool = bufpool.New[byte](256<<10, 8<<20)

// putBody returns a buffer from readBodyBuffer to the pool.
func putBody(buf *[]byte) { bodyPool.Put(buf) }

// errBodyTooSlow is returned by readBody below the minimum rate.
var errBodyTooSlow = errors.New("request body arrived too slowly")

// maxBodyPrealloc is the most readBodyBuffer allocates before the bytes
// arrive: a declared Content-Length is only a claim, and a client declaring
// 64 MiB and sending nothing must not cost 64 MiB.
const maxBodyPrealloc = 1 << 20

// readBodyBuffer reads the request body into a pooled buffer, refusing
// more than l.MaxBodyBytes bytes and bodies slower than l.MinBodyRate
// after l.BodyGrace (the connection's read deadline moves with the bytes
// received). The caller must putBody the buffer when done with its bytes,
// error or not. It allocates nothing once the pool is warm (an
// io.LimitReader or a release closure would).
func readBodyBuffer(c *gin.Context, l Limits) (*[]byte, error) {
	limit := l.MaxBodyBytes
	if c.Request.ContentLength > limit {
		return bodyPool.Get(0), errBodyTooLarge
	}
	// +1: room to see EOF without growing.
	buf := bodyPool.Get(min(max(int(c.Request.ContentLength)+1, 0), maxBodyPrealloc))
	b := *buf
	defer func() { *buf = b }()
	body := c.Request.Body
	rc := http.NewResponseController(c.Writer)
	start := time.Now()
	deadlines := l.MinBodyRate > 0
	if deadlines {
		defer rc.SetReadDeadline(time.Time{})
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
		if deadlines {
			due := start.Add(l.BodyGrace + time.Duration(float64(len(b))/l.MinBodyRate*float64(time.Second)))
			// Not every writer can (a test's recorder): then no deadline.
			deadlines = rc.SetReadDeadline(due) == nil
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return buf, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return buf, fmt.Errorf("%w: %d bytes in %s, want %.0f bytes/s after %s",
				errBodyTooSlow, len(b), time.Since(start).Round(time.Millisecond), l.MinBodyRate, l.BodyGrace)
		}
		if err != nil {
			return buf, fmt.Errorf("read request body: %w", err)
		}
	}
}

// readBody is readBodyBuffer for callers that prefer a release function.
func readBody(c *gin.Context, l Limits) (body []byte, release func(), err error) {
	buf, err := readBodyBuffer(c, l)
	release = func() { putBody(buf) }
	if err != nil {
		return nil, release, err
	}
	return *buf, release, nil
}

// readBodyOrFail reads the body and answers the error itself; ok is false
// when the handler must return.
func readBodyOrFail(c *gin.Context, l Limits) ([]byte, func(), bool) {
	body, release, err := readBody(c, l)
	if err != nil {
		release()
		writeBodyError(c, err, l.MaxBodyBytes)
		return nil, nil, false
	}
	return body, release, true
}

// writeBodyError answers a failure to read the request body.
func writeBodyError(c *gin.Context, err error, limit int64) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeDetail(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", limit))
	case errors.Is(err, admission.ErrArrivingFull):
		c.Header("Retry-After", "1")
		c.Header("Connection", "close") // the body may be unread
		writeDetail(c, http.StatusServiceUnavailable, err.Error()+"; nothing from this request was stored, retry later")
	case errors.Is(err, errBodyTooSlow):
		c.Header("Connection", "close")
		writeDetail(c, http.StatusRequestTimeout, err.Error())
	default:
		writeDetail(c, http.StatusBadRequest, err.Error())
	}
}

// checkContentType refuses bodies declared as something other than JSON.
// A missing Content-Type is accepted, as the reference does.
func checkContentType(c *gin.Context) bool {
	ct := c.GetHeader("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return true
	}
	writeDetail(c, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send application/json", ct))
	return false
}

// nullableTimestamp is timestamp, or nil for the zero time.
func nullableTimestamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return wire.Timestamp(t)
}
