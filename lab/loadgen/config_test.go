package loadgen

import (
	"strings"
	"testing"
	"time"
)

func TestConfigRefusesNonLoopbackTargets(t *testing.T) {
	base := Config{Rate: 10, Duration: time.Second}
	for _, tc := range []struct {
		name, predictor, trainer string
		ingest                   float64
		allowRemote              bool
		want                     string // "" = accepted
	}{
		{"ipv4 loopback", "http://127.0.0.1:8001", "", 0, false, ""},
		{"other 127/8 address", "http://127.3.2.1:8001", "", 0, false, ""},
		{"localhost", "http://localhost:8001", "", 0, false, ""},
		{"ipv6 loopback", "http://[::1]:8001", "", 0, false, ""},
		{"private address", "http://10.1.2.3:8001", "", 0, false, "not loopback"},
		{"public name", "http://example.com", "", 0, false, "--allow-remote"},
		{"name that may resolve to loopback", "http://localhost.example:8001", "", 0, false, "not loopback"},
		{"remote allowed explicitly", "http://10.1.2.3:8001", "", 0, true, ""},
		{"remote trainer", "http://127.0.0.1:8001", "http://192.168.0.9:8000", 0, false, "trainer URL"},
		{"ingest without trainer", "http://127.0.0.1:8001", "", 1000, false, "trainer URL"},
		{"not http", "ftp://127.0.0.1:8001", "", 0, false, "http://"},
		{"no host", "http:///predict", "", 0, false, "no host"},
		{"missing", "", "", 0, false, "predictor URL: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.PredictorURL, c.TrainerURL, c.IngestRate, c.AllowRemote = tc.predictor, tc.trainer, tc.ingest, tc.allowRemote
			_, err := c.withDefaults()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestConfigBounds(t *testing.T) {
	ok := Config{PredictorURL: "http://127.0.0.1:1", Rate: 10, Duration: time.Second}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"nothing to send", func(c *Config) { c.Rate = 0 }, "nothing to send"},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "rate -1"},
		{"rate too high", func(c *Config) { c.Rate = 2 * MaxRate }, "rate"},
		{"no duration", func(c *Config) { c.Duration = 0 }, "duration"},
		{"duration too long", func(c *Config) { c.Duration = 2 * MaxDuration }, "duration"},
		{"too many rows", func(c *Config) { c.Rows = MaxRows + 1 }, "rows"},
		{"negative concurrency", func(c *Config) { c.Concurrency = -1 }, "concurrency"},
		{"unknown path", func(c *Config) { c.Path = "/predict" }, "path"},
		{"negative warmup", func(c *Config) { c.Warmup = -time.Second }, "warmup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
	c, err := ok.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Rows != 10 || c.Concurrency != 36 || c.IngestBatch != 1000 || c.Timeout != 10*time.Second ||
		c.Path != "/predict/bulk/strict" || c.Source == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
}
