package testserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvZooKeeperClasspath overrides the discovery of ZooKeeper's jars.
const EnvZooKeeperClasspath = "DLOCK_ZOOKEEPER_CLASSPATH"

// zkJava finds the java binary and the classpath for ZooKeeper's server.
func zkJava() (java, classpath string, err error) {
	java, err = findJava()
	if err != nil {
		return "", "", err
	}
	classpath, err = zkClasspath()
	return java, classpath, err
}

// findJava prefers $JAVA_HOME/bin/java, then java on $PATH.
func findJava() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		if j := filepath.Join(h, "bin", "java"); isFile(j) {
			return j, nil
		}
	}
	j, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("java not found (set JAVA_HOME or put java on PATH): apt-get install zookeeper (it brings a JRE)")
	}
	return j, nil
}

// zkClasspath builds the classpath the way the distributions lay ZooKeeper
// out:
//   - $DLOCK_ZOOKEEPER_CLASSPATH as given;
//   - an upstream tarball at $ZOOKEEPER_HOME: its *.jar and lib/*.jar;
//   - /usr/share/zookeeper/*.jar and lib/*.jar (older Debian/Ubuntu);
//   - Debian 12's /usr/share/java/zookeeper.jar, whose manifest Class-Path
//     names its dependencies, plus slf4j-simple so the server logs at all,
//     and netty-codec and netty-resolver, which the manifest leaves out and
//     a secure client port (NettyServerCnxnFactory) needs.
func zkClasspath() (string, error) {
	if cp := os.Getenv(EnvZooKeeperClasspath); cp != "" {
		return cp, nil
	}
	var homes []string
	if h := os.Getenv("ZOOKEEPER_HOME"); h != "" {
		homes = append(homes, h)
	}
	homes = append(homes, "/usr/share/zookeeper")
	for _, h := range homes {
		var jars []string
		for _, pat := range []string{filepath.Join(h, "*.jar"), filepath.Join(h, "lib", "*.jar")} {
			m, _ := filepath.Glob(pat)
			jars = append(jars, m...)
		}
		for _, j := range jars {
			if b := filepath.Base(j); b == "zookeeper.jar" || strings.HasPrefix(b, "zookeeper-3") {
				return strings.Join(jars, string(os.PathListSeparator)), nil
			}
		}
	}
	const debian = "/usr/share/java/zookeeper.jar"
	if isFile(debian) {
		cp := debian
		for _, s := range []string{"slf4j-simple", "netty-codec", "netty-resolver"} {
			if s := "/usr/share/java/" + s + ".jar"; isFile(s) {
				cp += string(os.PathListSeparator) + s
			}
		}
		return cp, nil
	}
	return "", fmt.Errorf("ZooKeeper jars not found in %s or %s: apt-get install zookeeper, or set %s",
		strings.Join(homes, ", "), debian, EnvZooKeeperClasspath)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
