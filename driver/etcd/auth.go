package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// login keeps the auth token of a Locker opened from a URL with a user
// and password, in place of etcd's client: that client (v3.6) sends its
// stale token with the Authenticate request meant to replace it, and
// etcd before 3.5 checks the token of every request, Authenticate's
// included (fixed by etcd-io/etcd#12165), so after a 3.4 member restarts
// (its simple tokens live in its memory) the client can never log in
// again: every call fails, each an Authenticate that calls itself until
// its context ends. login sends Authenticate with no token; a call
// refused for its token (invalid, empty, or of an older auth revision)
// logs in again and is sent once more (refused for its token, it did
// nothing on the server); one refused for an older auth revision is
// first sent again as it is.
type login struct {
	user, password string

	sem chan struct{} // one Authenticate at a time; a slot, so a wait ends with its context

	mu    sync.Mutex
	in    bool   // logged in (false at first and after expire)
	token string // "" when auth is off
	gen   int    // counts log-ins: a renewal for a refused token is made once
	at    time.Time
}

func newLogin(user, password string) *login {
	return &login{user: user, password: password, sem: make(chan struct{}, 1)}
}

const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// state is the token, whether logged in, and which log-in made it.
func (a *login) state() (token string, in bool, gen int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token, a.in, a.gen
}

// expire forgets the token, so the next call logs in first: for a watch
// the server cancelled for its rights, which a stale token also causes
// (the watch's refusal does not say which). A token less than a second
// old is kept: a user who may not watch would otherwise log in (a
// password hash on the server) at each of the watcher's retries.
func (a *login) expire() {
	a.mu.Lock()
	if time.Since(a.at) >= time.Second {
		a.in = false
	}
	a.mu.Unlock()
}

// renew logs in, unless another call logged in since log-in gen (and
// the token was not expired since): callers refused together log in once.
func (a *login) renew(ctx context.Context, cc *grpc.ClientConn, gen int) error {
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.sem }()
	if _, in, now := a.state(); in && now != gen {
		return nil
	}
	token := ""
	resp, err := pb.NewAuthClient(cc).Authenticate(ctx, &pb.AuthenticateRequest{Name: a.user, Password: a.password}, failFast)
	switch {
	case err == nil:
		token = resp.Token
	case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthNotEnabled):
		// calls are answered with no token
	default:
		return ctxErr(ctx, err)
	}
	a.mu.Lock()
	a.in, a.token, a.at = true, token, time.Now()
	a.gen++
	a.mu.Unlock()
	return nil
}

// tokenRefused reports whether the server refused a request for its
// token rather than for what it asked.
func tokenRefused(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrInvalidAuthToken, rpctypes.ErrUserEmpty, rpctypes.ErrAuthOldRevision:
		return true
	}
	return false
}

// unary is the client's unary interceptor: it logs in before a call when
// it has no token, and again when the call's token was refused. A log-in
// is bounded by the call's context, not by a try's (bound.go): a try
// that ends while it logs in is sent again, logged in.
func (a *login) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	resent, renewed := false, false
	for {
		_, in, gen := a.state()
		if !in {
			if err := a.renew(callContext(ctx), cc, gen); err != nil {
				return err
			}
			_, _, gen = a.state()
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if !tokenRefused(err) {
			return err
		}
		if !resent && rpctypes.Error(err) == rpctypes.ErrAuthOldRevision {
			// Checked before a change of users or roles and applied
			// after it: a simple token is still good (it stands for
			// the store's revision at each check), so it is sent
			// again as it is; a log-in, which etcd makes again while
			// the store changes under its password check, could take
			// seconds while roles change. A JWT names its revision:
			// refused again, it is renewed.
			resent = true
			continue
		}
		if renewed {
			return err
		}
		if err := a.renew(callContext(ctx), cc, gen); err != nil {
			return err
		}
		renewed = true
	}
}

// stream is the client's stream interceptor: a stream (Watch,
// LeaseKeepAlive) carries the token it was opened with, so it is opened
// logged in.
func (a *login) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if _, in, gen := a.state(); !in {
		if err := a.renew(callContext(ctx), cc, gen); err != nil {
			return nil, err
		}
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// GetRequestMetadata puts the token on every request but Authenticate
// (credentials.PerRPCCredentials).
func (a *login) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && ri.Method == authenticateMethod {
		return nil, nil
	}
	tok, _, _ := a.state()
	if tok == "" {
		return nil, nil
	}
	return map[string]string{rpctypes.TokenFieldNameGRPC: tok}, nil
}

// RequireTransportSecurity is false: etcd takes a token over plain
// connections too (credentials.PerRPCCredentials).
func (a *login) RequireTransportSecurity() bool { return false }

// dialOptions are the gRPC options that make a's client log in as a.
func (a *login) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithPerRPCCredentials(a),
		grpc.WithChainUnaryInterceptor(a.unary),
		grpc.WithChainStreamInterceptor(a.stream),
	}
}
