// The queryable state bench's HTTP load generator (bench/queryable_state.py builds and runs it).
//
// It is written in Go, as wrk and hey are, so that on a 2-core machine the client takes as little
// of the CPU the job under test needs as it can: the bench measures the job manager and the tasks,
// not a Python HTTP client (aiohttp's client alone costs ~0.1-0.2 ms of CPU per request).
//
//	loadgen closed URL KEYS CONCURRENCY SECONDS   # CONCURRENCY requests in flight, back to back
//	loadgen open   URL KEYS RATE SECONDS          # RATE requests/s on a fixed schedule
//
// URL holds "{key}", replaced by a random key in [0, KEYS). In the open loop a request's latency is
// counted from the moment it was due, not from when it went out, so a stalled server is not hidden
// by requests that were sent late (coordinated omission). Prints JSON: {"ms": [...], "errors": n,
// "first_error": "..."}; an error is anything but a 200 whose body says "found":true.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

type result struct {
	Ms         []float64 `json:"ms"`
	Errors     int       `json:"errors"`
	FirstError string    `json:"first_error,omitempty"`
	mu         sync.Mutex
}

func (r *result) add(ms float64, err string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Ms = append(r.Ms, ms)
	if err != "" {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = err
		}
	}
}

var found = regexp.MustCompile(`"found":\s*true`)

func lookup(client *http.Client, url string) string {
	resp, err := client.Get(url)
	if err != nil {
		return err.Error()
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err.Error()
	}
	if resp.StatusCode != 200 || !found.Match(body) {
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	return ""
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: loadgen closed|open URL KEYS CONCURRENCY|RATE SECONDS")
		os.Exit(2)
	}
	mode, template := os.Args[1], os.Args[2]
	keys, _ := strconv.Atoi(os.Args[3])
	arg, _ := strconv.ParseFloat(os.Args[4], 64)
	seconds, _ := strconv.ParseFloat(os.Args[5], 64)
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024, DisableCompression: true}}
	keyURL := func(rng *rand.Rand) string {
		return strings.Replace(template, "{key}", strconv.Itoa(rng.Intn(keys)), 1)
	}
	res := &result{Ms: []float64{}}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(time.Duration(seconds * float64(time.Second)))
	switch mode {
	case "closed":
		for w := 0; w < int(arg); w++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				for time.Now().Before(stop) {
					t0 := time.Now()
					err := lookup(client, keyURL(rng))
					res.add(float64(time.Since(t0).Microseconds())/1000, err)
				}
			}(int64(w) + 1)
		}
	case "open":
		rng := rand.New(rand.NewSource(1))
		n := int(arg * seconds)
		for i := 0; i < n; i++ {
			due := start.Add(time.Duration(float64(i) / arg * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func(url string, due time.Time) {
				defer wg.Done()
				err := lookup(client, url)
				res.add(float64(time.Since(due).Microseconds())/1000, err)
			}(keyURL(rng), due)
		}
	default:
		fmt.Fprintln(os.Stderr, "mode must be closed or open")
		os.Exit(2)
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(res)
}
