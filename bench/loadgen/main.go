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
//	loadgen closed-direct HOST:PORT/NAME KEYS CONCURRENCY SECONDS  # the same, straight to the subtask
//	loadgen open-direct   HOST:PORT/NAME KEYS RATE SECONDS         # that owns the key (its lookup port)
//
// The direct modes ask the proxy for the state's route once ({"route": NAME}: each subtask's lookup
// port and ticket), then hash each key as the job does (integer keys: splitmix64, runtime/keygroups.py)
// to the subtask owning its key group, as QueryableStateClient does given the job's key type.
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
	waiting map[int]func(err string) // called by the reader with the answer ("" or what was wrong)
	lastRaw string // the last answer that was not a found value (the route's answer, for dialDirect)
}

func frame(doc any) []byte {
	body, _ := json.Marshal(doc)
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out
}

func readBody(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, body)
	return body, err
}

func readFrame(r *bufio.Reader) (map[string]any, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(body, &doc)
}

// answerDoc is what the reader needs of an answer (a struct: decoding into a map costs the client
// CPU the job on the same 2 cores would otherwise have).
type answerDoc struct {
	ID      int    `json:"id"`
	Status  int    `json:"status"`
	Results []struct {
		Found bool `json:"found"`
	} `json:"results"`
}

func dialProxy(target string) *proxyConn {
	slash := strings.Index(target, "/")
	p, _ := dial(target[:slash], target[slash+1:], map[string]any{"token": os.Getenv("STREAMJOB_REST_TOKEN")})
	return p
}

// dial opens a connection speaking the frames, greets it (hello: the proxy's token or a subtask's
// ticket) and starts its reader; returns the greeting's answer too.
func dial(addr, name string, hello map[string]any) (*proxyConn, map[string]any) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p := &proxyConn{conn: conn, name: name, waiting: map[int]func(string){}}
	r := bufio.NewReaderSize(conn, 1<<16)
	conn.Write(frame(hello))
	answer, err := readFrame(r)
	if err != nil || answer["status"] != nil {
		fmt.Fprintln(os.Stderr, "hello:", answer, err)
		os.Exit(1)
	}
	go func() {
		for {
			body, err := readBody(r)
			if err != nil {
				p.mu.Lock()
				for id, done := range p.waiting {
					done(err.Error())
					delete(p.waiting, id)
				}
				p.mu.Unlock()
				return
			}
			var doc answerDoc
			json.Unmarshal(body, &doc)
			msg := ""
			if doc.Status != 200 || len(doc.Results) != 1 || !doc.Results[0].Found {
				msg = string(body)
			}
			p.mu.Lock()
			if msg != "" {
				p.lastRaw = msg
			}
			done := p.waiting[doc.ID]
			delete(p.waiting, doc.ID)
			p.mu.Unlock()
			if done != nil {
				done(msg)
			}
		}
	}()
	return p, answer
}

// router sends each key to a connection of the subtask owning its key group.
type router struct {
	maxP, p int
	conns   [][]*proxyConn // per subtask
}

func splitmix64(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func dialDirect(target string, perSubtask int) *router {
	proxy := dialProxy(target)
	ch := make(chan string, 1)
	proxy.mu.Lock()
	proxy.waiting[0] = func(err string) { ch <- err }
	proxy.mu.Unlock()
	proxy.conn.Write(frame(map[string]any{"id": 0, "route": proxy.name}))
	<-ch // the reader takes the route for an error (it has no results): read it from the message
	var route map[string]any
	json.Unmarshal([]byte(proxy.lastRaw), &route)
	if route["status"] != float64(200) {
		fmt.Fprintln(os.Stderr, "route:", proxy.lastRaw)
		os.Exit(1)
	}
	if kt := route["key_type"]; kt != "Long" && kt != "Integer" && kt != "None" {
		fmt.Fprintln(os.Stderr, "the direct modes hash integer keys; this state's key type is", kt)
		os.Exit(1)
	}
	rt := &router{maxP: int(route["max_parallelism"].(float64)), p: int(route["parallelism"].(float64))}
	for _, s := range route["subtasks"].([]any) {
		where := s.([]any)
		addr := net.JoinHostPort(where[0].(string), strconv.Itoa(int(where[1].(float64))))
		var conns []*proxyConn
		for i := 0; i < perSubtask; i++ {
			c, _ := dial(addr, proxy.name, map[string]any{"ticket": where[2]})
			conns = append(conns, c)
		}
		rt.conns = append(rt.conns, conns)
	}
	proxy.conn.Close()
	return rt
}

func (rt *router) conn(key int, i int) *proxyConn {
	group := int(splitmix64(uint64(key)) % uint64(rt.maxP))
	subtask := group * rt.p / rt.maxP
	conns := rt.conns[subtask]
	return conns[i%len(conns)]
}

// send writes one lookup; done is called with its answer. No goroutine or channel per request: at
// 1,000 requests/s those are CPU the client takes from the job on this machine.
func (p *proxyConn) send(key int, done func(string)) {
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.waiting[id] = done
	p.mu.Unlock()
	out := frame(map[string]any{"id": id, "name": p.name, "keys": []int{key}})
	p.wmu.Lock()
	_, err := p.conn.Write(out)
	p.wmu.Unlock()
	if err != nil {
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
		done(err.Error())
	}
}

func (p *proxyConn) lookup(key int) string {
	ch := make(chan string, 1)
	p.send(key, func(err string) { ch <- err })
	return <-ch
}

// openLoop sends n requests on a fixed schedule; a request's latency counts from when it was due.
func openLoop(n int, rate float64, start time.Time, res *result, wg *sync.WaitGroup, next func(i int) (*proxyConn, int)) {
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		p, key := next(i)
		p.send(key, func(err string) {
			res.add(float64(time.Since(due).Microseconds())/1000, err)
			wg.Done()
		})
	}
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: loadgen closed|open|closed-proxy|open-proxy|closed-direct|open-direct URL|HOST:PORT/NAME KEYS CONCURRENCY|RATE SECONDS")
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
	var direct *router
	if mode == "open-direct" {
		// LOADGEN_CONNECTIONS per subtask (QueryableStateClient keeps one), else half the proxy's.
		perSubtask := proxyConnections / 2
		if v, err := strconv.Atoi(os.Getenv("LOADGEN_CONNECTIONS")); err == nil && v > 0 {
			perSubtask = v
		}
		direct = dialDirect(template, perSubtask)
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
		openLoop(int(arg*seconds), arg, start, res, &wg, func(i int) (*proxyConn, int) {
			return conns[i%proxyConnections], rng.Intn(keys)
		})
	case "closed-direct":
		for w := 0; w < int(arg); w++ {
			wg.Add(1)
			rt := dialDirect(template, 1)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				for time.Now().Before(stop) {
					t0 := time.Now()
					key := rng.Intn(keys)
					err := rt.conn(key, 0).lookup(key)
					res.add(float64(time.Since(t0).Microseconds())/1000, err)
				}
			}(int64(w) + 1)
		}
	case "open-direct":
		rng := rand.New(rand.NewSource(1))
		openLoop(int(arg*seconds), arg, start, res, &wg, func(i int) (*proxyConn, int) {
			key := rng.Intn(keys)
			return direct.conn(key, i), key
		})
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
		fmt.Fprintln(os.Stderr, "mode must be closed, open, closed-proxy, open-proxy, closed-direct or open-direct")
		os.Exit(2)
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(res)
}
