// The queryable state bench's HTTP load generator (bench/queryable_state.py builds and runs it).
//
// It is written in Go, as wrk and hey are, so that on a 2-core machine the client takes as little
// of the CPU the job under test needs as it can: the bench measures the job manager and the tasks,
// not a Python HTTP client (aiohttp's client alone costs ~0.1-0.2 ms of CPU per request).
//
//	loadgen closed URL KEYS CONCURRENCY SECONDS   # CONCURRENCY requests in flight, back to back
//	loadgen open   URL KEYS RATE SECONDS          # RATE requests/s on a fixed schedule
//	loadgen closed-proxy HOST:PORT/NAME KEYS CONCURRENCY SECONDS   # the same, through the queryable
//	loadgen open-proxy   HOST:PORT/NAME KEYS RATE SECONDS          # state proxy's port (query_proxy.py)
//
// URL holds "{key}", replaced by a random key in [0, KEYS). The proxy modes speak the proxy's frames
// (4-byte big-endian length, JSON) on connections kept open: one per worker in the closed loop,
// PROXY_CONNECTIONS (8) shared by the open loop, each with its requests pipelined. In the open loop a request's latency is
// counted from the moment it was due, not from when it went out, so a stalled server is not hidden
// by requests that were sent late (coordinated omission). Prints JSON: {"ms": [...], "errors": n,
// "first_error": "..."}; an error is anything but a 200 whose body says "found":true.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
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

const proxyConnections = 8

// proxyConn is one connection to the proxy: requests written under a lock, answers read by one goroutine
// and handed to whoever waits for their id.
type proxyConn struct {
	conn    net.Conn
	name    string
	wmu     sync.Mutex
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan string
}

func frame(doc any) []byte {
	body, _ := json.Marshal(doc)
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out
}

func readFrame(r *bufio.Reader) (map[string]any, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(body, &doc)
}

func dialProxy(target string) *proxyConn {
	slash := strings.Index(target, "/")
	conn, err := net.Dial("tcp", target[:slash])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p := &proxyConn{conn: conn, name: target[slash+1:], waiting: map[int]chan string{}}
	r := bufio.NewReaderSize(conn, 1<<16)
	conn.Write(frame(map[string]any{"token": os.Getenv("STREAMJOB_REST_TOKEN")}))
	if hello, err := readFrame(r); err != nil || hello["status"] != nil {
		fmt.Fprintln(os.Stderr, "proxy hello:", hello, err)
		os.Exit(1)
	}
	go func() {
		for {
			doc, err := readFrame(r)
			if err != nil {
				p.mu.Lock()
				for id, ch := range p.waiting {
					ch <- err.Error()
					delete(p.waiting, id)
				}
				p.mu.Unlock()
				return
			}
			id := int(doc["id"].(float64))
			msg := ""
			results, _ := doc["results"].([]any)
			if doc["status"].(float64) != 200 || len(results) != 1 || results[0].(map[string]any)["found"] != true {
				b, _ := json.Marshal(doc)
				msg = string(b)
			}
			p.mu.Lock()
			ch := p.waiting[id]
			delete(p.waiting, id)
			p.mu.Unlock()
			ch <- msg
		}
	}()
	return p
}

func (p *proxyConn) lookup(key int) string {
	ch := make(chan string, 1)
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.waiting[id] = ch
	p.mu.Unlock()
	out := frame(map[string]any{"id": id, "name": p.name, "keys": []int{key}})
	p.wmu.Lock()
	_, err := p.conn.Write(out)
	p.wmu.Unlock()
	if err != nil {
		return err.Error()
	}
	return <-ch
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: loadgen closed|open|closed-proxy|open-proxy URL|HOST:PORT/NAME KEYS CONCURRENCY|RATE SECONDS")
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
	var conns []*proxyConn
	if mode == "open-proxy" {
		for i := 0; i < proxyConnections; i++ {
			conns = append(conns, dialProxy(template))
		}
	}
	start := time.Now()
	stop := start.Add(time.Duration(seconds * float64(time.Second)))
	switch mode {
	case "closed-proxy":
		for w := 0; w < int(arg); w++ {
			wg.Add(1)
			p := dialProxy(template)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				for time.Now().Before(stop) {
					t0 := time.Now()
					err := p.lookup(rng.Intn(keys))
					res.add(float64(time.Since(t0).Microseconds())/1000, err)
				}
			}(int64(w) + 1)
		}
	case "open-proxy":
		rng := rand.New(rand.NewSource(1))
		n := int(arg * seconds)
		for i := 0; i < n; i++ {
			due := start.Add(time.Duration(float64(i) / arg * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func(p *proxyConn, key int, due time.Time) {
				defer wg.Done()
				err := p.lookup(key)
				res.add(float64(time.Since(due).Microseconds())/1000, err)
			}(conns[i%proxyConnections], rng.Intn(keys), due)
		}
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
		fmt.Fprintln(os.Stderr, "mode must be closed, open, closed-proxy or open-proxy")
		os.Exit(2)
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(res)
}
