package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfigInline(t *testing.T) {
	base := DefaultConfig()
	c, err := ParseConfig("kv_blocks=4096, prefix_caching=false,servers=3,step_ms=12.5,prefill_free_tokens=0", base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "kv_blocks=4096, prefix_caching=false,servers=3,step_ms=12.5,prefill_free_tokens=0" {
		t.Errorf("name %q, want the spec", c.Name)
	}
	if c.KVBlocks != 4096 || c.PrefixCaching || c.Servers != 3 || c.Cost.StepMs != 12.5 || c.Cost.PrefillFreeTokens != 0 {
		t.Errorf("parsed %+v", c)
	}
	if c.MaxNumSeqs != base.MaxNumSeqs || c.Cost.PrefillTokenMs != base.Cost.PrefillTokenMs {
		t.Error("keys not given did not keep the base values")
	}
	named, err := ParseConfig("name=small,kv_blocks=64", base)
	if err != nil || named.Name != "small" {
		t.Errorf("name key: %q, %v", named.Name, err)
	}
}

func TestParseConfigYAML(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big-cache.yaml")
	os.WriteFile(path, []byte("kv_blocks: 30000\nmax_num_batched_tokens: 2048\ndecode_seq_ms: 0.1\n"), 0o644)
	c, err := ParseConfig(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "big-cache" || c.KVBlocks != 30000 || c.MaxNumBatchedTokens != 2048 || c.Cost.DecodeSeqMs != 0.1 {
		t.Errorf("parsed %+v", c)
	}
	empty := filepath.Join(dir, "empty.yml")
	os.WriteFile(empty, nil, 0o644)
	if c, err := ParseConfig(empty, DefaultConfig()); err != nil || c.KVBlocks != DefaultConfig().KVBlocks {
		t.Errorf("empty file: %+v, %v", c, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("kv_block: 10\n"), 0o644)
	tests := []struct{ spec, want string }{
		{"kv_blocks=many", "not an integer"},
		{"prefix_caching=maybe", "not true or false"},
		{"kv_block=10", "unknown key"},
		{"kv_blocks", "not key=value"},
		{"kv_blocks=0", "kv_blocks"},
		{"step_ms=-1", "step_ms"},
		{typo, "kv_block"},
		{filepath.Join(dir, "missing.yaml"), "read config"},
	}
	for _, tt := range tests {
		_, err := ParseConfig(tt.spec, DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseConfig(%q) error %v, want one mentioning %q", tt.spec, err, tt.want)
		}
	}
}
