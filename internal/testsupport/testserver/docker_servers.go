package testserver

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The servers run with the same configuration as local ones (redis.conf,
// memcached flags, zoo.cfg), written into /dlock in the container. Every
// command is given in full, with an explicit entrypoint, so that it works
// both in the official images and in the ones `make images` stages from
// Debian packages: redis-server, redis-cli and memcached are on PATH in
// both; ZooKeeper's jars are not in the same place, which zkstart.sh sorts
// out.

const containerDir = "/dlock"

//go:embed zkstart.sh
var zkStartScript []byte

//go:embed pgstart.sh
var pgStartScript []byte

func (dockerProvider) Redis(lt Lifetime, opts *RedisOptions) (*Redis, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	r, err := newRedisUser(opts)
	if err != nil {
		return nil, err
	}
	if r.TLS, err = newTLS(lt, opts.TLS); err != nil {
		return nil, err
	}
	err = startWithRetry(func() error {
		port, err := FreePort()
		if err != nil {
			return err
		}
		spec := redisSpec(port, redisBaseConf(port, containerDir, opts.Persistence)+r.userConf(opts), opts.Args)
		if r.TLS != nil {
			files, paths, err := r.TLS.containerFiles()
			if err != nil {
				return err
			}
			spec.files[0].data = append(spec.files[0].data, redisTLSConf(port, paths)...)
			spec.files = append(spec.files, files...)
			spec.ready = redisPinger(r.TLS.probeConfig())
		}
		n, err := e.launch(lt, spec)
		if err != nil {
			return err
		}
		r.Server = NewServer(n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func redisSpec(port int, conf string, args []string) containerSpec {
	confPath := containerDir + "/redis.conf"
	return containerSpec{
		server:     "redis-server",
		port:       port,
		image:      ContainerImage(KindRedis),
		entrypoint: []string{"redis-server"},
		cmd:        append([]string{confPath}, args...),
		files:      []containerFile{{path: confPath, data: []byte(conf), mode: 0o644}},
		ready:      redisPing,
		timeout:    15 * time.Second,
	}
}

func (dockerProvider) RedisCluster(lt Lifetime, opts *RedisClusterOptions) (*RedisCluster, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	nodeTimeout := opts.NodeTimeout
	if nodeTimeout <= 0 {
		nodeTimeout = 2 * time.Second
	}
	c := &RedisCluster{}
	err = startWithRetry(func() error {
		ports, err := freeBusPorts(clusterMasters)
		if err != nil {
			return err
		}
		nodes := make([]*containerNode, len(ports))
		errs := make([]error, len(ports))
		var wg sync.WaitGroup
		for i, port := range ports {
			conf := redisBaseConf(port, containerDir, opts.Persistence) + fmt.Sprintf(
				"cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout %d\n",
				nodeTimeout.Milliseconds())
			wg.Add(1)
			go func() {
				defer wg.Done()
				nodes[i], errs[i] = e.launch(lt, redisSpec(port, conf, nil))
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, n := range nodes {
				if n != nil {
					n.Kill()
				}
			}
			return err
		}
		c.Nodes = nil
		for _, n := range nodes {
			c.Nodes = append(c.Nodes, NewServer(n))
		}
		if err := containerClusterCreate(nodes[0], c.Addrs()); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := waitClusterOK(ctx, c.Addrs()); err != nil {
			return err
		}
		// From now on a node is ready only once it serves the cluster again.
		for _, n := range nodes {
			n.setReady(clusterNodeOK)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// containerClusterCreate joins the nodes with redis-cli --cluster create,
// run inside the first node's container (the host may have no redis-cli).
func containerClusterCreate(n *containerNode, addrs []string) error {
	cmd := append([]string{"redis-cli", "--cluster", "create"}, addrs...)
	cmd = append(cmd, "--cluster-replicas", "0", "--cluster-yes")
	var r containerrpc.ExecReply
	err := n.e.h.call("Exec", containerrpc.ExecArgs{ID: n.cid, Cmd: cmd}, &r)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit code %d", r.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("testserver: %s: %s: %v\n%s", n.name, strings.Join(cmd, " "), err, strings.TrimSpace(r.Output))
	}
	return nil
}

func (dockerProvider) Memcached(lt Lifetime, opts *MemcachedOptions) (*Memcached, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	opts = memcachedDefaults(opts)
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	var files []containerFile
	var tp *tlsPaths
	if t != nil {
		var p tlsPaths
		if files, p, err = t.containerFiles(); err != nil {
			return nil, err
		}
		tp = &p
	}
	m := &Memcached{TLS: t}
	for range opts.Servers {
		err := startWithRetry(func() error {
			port, err := FreePort()
			if err != nil {
				return err
			}
			// -u: memcached refuses to run as root without it; the official
			// image runs as memcache already, and then -u is ignored.
			cmd := append(memcachedArgs(port, opts, tp), "-u", "memcache")
			n, err := e.launch(lt, containerSpec{
				server:     "memcached",
				port:       port,
				image:      ContainerImage(KindMemcached),
				entrypoint: []string{"memcached"},
				cmd:        append(cmd, opts.Args...),
				files:      files,
				ready:      memcachedVersioner(t.probeConfig()),
				timeout:    10 * time.Second,
			})
			if err != nil {
				return err
			}
			m.Nodes = append(m.Nodes, NewServer(n))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (dockerProvider) ZooKeeper(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error) {
	return dockerZooKeeper(lt, opts, 1)
}

func (dockerProvider) ZooKeeperEnsemble(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error) {
	return dockerZooKeeper(lt, opts, 3)
}

func dockerZooKeeper(lt Lifetime, opts *ZooKeeperOptions, servers int) (*ZooKeeper, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{TLS: t}
	err = startWithRetry(func() error {
		ports, err := FreePorts(3 * servers)
		if err != nil {
			return err
		}
		all := make([]zkNode, servers)
		for i := range all {
			all[i] = zkNode{id: i + 1, client: ports[3*i], peer: ports[3*i+1], election: ports[3*i+2], dir: containerDir}
		}
		// Start all at once: an ensemble node is ready only with a quorum.
		nodes := make([]*containerNode, servers)
		errs := make([]error, servers)
		var wg sync.WaitGroup
		for i, n := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec, err := zkSpec(n, all, opts, t)
				if err != nil {
					errs[i] = err
					return
				}
				nodes[i], errs[i] = e.launch(lt, spec)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, n := range nodes {
				if n != nil {
					n.Kill()
				}
			}
			return err
		}
		z.Nodes = nil
		for _, n := range nodes {
			z.Nodes = append(z.Nodes, NewServer(n))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return z, nil
}

func zkSpec(n zkNode, all []zkNode, opts *ZooKeeperOptions, t *TLS) (containerSpec, error) {
	dataDir := containerDir + "/data"
	cfgPath := containerDir + "/zoo.cfg"
	script := containerDir + "/zkstart.sh"
	var tlsFiles []containerFile
	var tp *tlsPaths
	if t != nil {
		files, p, err := t.containerFiles()
		if err != nil {
			return containerSpec{}, err
		}
		tlsFiles, tp = files, &p
	}
	files := []containerFile{
		{path: cfgPath, data: []byte(zkConfig(n, all, opts, dataDir, tp)), mode: 0o644},
		{path: script, data: zkStartScript, mode: 0o755},
	}
	files = append(files, tlsFiles...)
	if len(all) > 1 {
		files = append(files, containerFile{path: dataDir + "/myid", data: []byte(strconv.Itoa(n.id) + "\n"), mode: 0o644})
	}
	return containerSpec{
		server:     "zookeeper",
		port:       n.client,
		image:      ContainerImage(KindZooKeeper),
		entrypoint: []string{"sh", script},
		cmd:        append([]string{cfgPath}, zkJVMFlags(containerDir)...),
		files:      files,
		ready:      zkServer(t.probeConfig()),
		timeout:    60 * time.Second,
	}, nil
}

func (dockerProvider) Etcd(lt Lifetime, opts *EtcdOptions) (*Etcd, error) {
	return dockerEtcd(lt, opts, 1)
}

func (dockerProvider) EtcdCluster(lt Lifetime, opts *EtcdOptions) (*Etcd, error) {
	return dockerEtcd(lt, opts, 3)
}

// dockerEtcd starts etcd members in containers (host network), with the
// local provider's arguments and the data directory in the container.
func dockerEtcd(lt Lifetime, opts *EtcdOptions, members int) (*Etcd, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	var files []containerFile
	var tp *tlsPaths
	if t != nil {
		var p tlsPaths
		if files, p, err = t.containerFiles(); err != nil {
			return nil, err
		}
		tp = &p
	}
	et := &Etcd{TLS: t}
	err = startWithRetry(func() error {
		ports, err := FreePorts(2 * members)
		if err != nil {
			return err
		}
		ms := make([]etcdMember, members)
		for i := range ms {
			ms[i] = etcdMember{name: "m" + strconv.Itoa(i+1), client: ports[2*i], peer: ports[2*i+1], dir: containerDir}
		}
		// Start all at once: a member is healthy only with a quorum.
		nodes := make([]*containerNode, members)
		errs := make([]error, members)
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nodes[i], errs[i] = e.launch(lt, containerSpec{
					server:     "etcd",
					port:       m.client,
					image:      ContainerImage(KindEtcd),
					entrypoint: []string{"etcd"},
					cmd:        etcdArgs(m, ms, opts, tp),
					files:      files,
					ready:      func(ctx context.Context, addr string) error { return etcdHealthy(ctx, addr, t.probeConfig()) },
					timeout:    30 * time.Second,
				})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, n := range nodes {
				if n != nil {
					n.Kill()
				}
			}
			return err
		}
		et.Nodes = nil
		for _, n := range nodes {
			et.Nodes = append(et.Nodes, NewServer(n))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return et, nil
}
