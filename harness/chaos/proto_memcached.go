package chaos

import (
	"bufio"
	"strings"
)

// mcFramer frames memcached's text protocol (classic and meta commands).
type mcFramer struct{}

var mcStorage = map[string]bool{"set": true, "add": true, "replace": true, "append": true, "prepend": true, "cas": true}

var mcMutating = map[string]bool{
	"set": true, "add": true, "replace": true, "append": true, "prepend": true, "cas": true,
	"delete": true, "incr": true, "decr": true, "touch": true, "gat": true, "gats": true,
	"ms": true, "md": true, "ma": true, "flush_all": true,
}

func (mcFramer) readRequest(r *bufio.Reader) ([]byte, Request, bool, error) {
	buf, line, err := readLine(r, nil)
	if err != nil {
		return buf, Request{}, false, err
	}
	w := strings.Fields(line)
	if len(w) == 0 {
		return buf, Request{}, true, nil // memcached answers ERROR
	}
	req := Request{Cmd: w[0], Args: w[1:], Mutating: mcMutating[w[0]]}
	if len(w) > 1 {
		req.Paths = []string{w[1]}
	}
	data := -1
	switch {
	case mcStorage[req.Cmd] && len(w) >= 5:
		if data, err = atoi(w[4]); err != nil {
			return buf, req, false, err
		}
	case req.Cmd == "ms" && len(w) >= 3:
		if data, err = atoi(w[2]); err != nil {
			return buf, req, false, err
		}
	}
	if data >= 0 {
		if buf, err = readN(r, buf, data+2); err != nil {
			return buf, req, false, err
		}
	}
	if req.Cmd == "quit" || w[len(w)-1] == "noreply" {
		return buf, req, false, nil
	}
	if strings.HasPrefix(req.Cmd, "m") && len(req.Cmd) == 2 && hasMetaFlag(w[2:], 'q') {
		return buf, req, false, parseErrorf("memcached: quiet meta command %q", line)
	}
	return buf, req, true, nil
}

func hasMetaFlag(words []string, flag byte) bool {
	for _, w := range words {
		if len(w) > 0 && w[0] == flag {
			return true
		}
	}
	return false
}

func (mcFramer) readReply(r *bufio.Reader, peek func() *Request) ([]byte, bool, error) {
	buf, line, err := readLine(r, nil)
	if err != nil {
		return buf, false, err
	}
	cmd := ""
	if req := peek(); req != nil {
		cmd = req.Cmd
	}
	switch cmd {
	case "get", "gets", "gat", "gats":
		for {
			w := strings.Fields(line)
			switch {
			case len(w) >= 4 && w[0] == "VALUE":
				n, err := atoi(w[3])
				if err != nil {
					return buf, true, err
				}
				if buf, err = readN(r, buf, n+2); err != nil {
					return buf, true, err
				}
			case line == "END":
				return buf, true, nil
			default: // an error line ends the reply
				return buf, true, nil
			}
			if buf, line, err = readLine(r, buf); err != nil {
				return buf, true, err
			}
		}
	case "stats":
		for strings.HasPrefix(line, "STAT ") {
			if buf, line, err = readLine(r, buf); err != nil {
				return buf, true, err
			}
		}
		return buf, true, nil
	case "mg":
		if w := strings.Fields(line); len(w) >= 2 && w[0] == "VA" {
			n, err := atoi(w[1])
			if err != nil {
				return buf, true, err
			}
			buf, err = readN(r, buf, n+2)
			return buf, true, err
		}
	}
	return buf, true, nil
}
