#!/bin/sh
# zkstart.sh ZOO_CFG [JVM option...]
#
# Starts ZooKeeper's server (QuorumPeerMain) with the given zoo.cfg inside a
# container, whichever of two images it runs in:
#   - the official zookeeper image: the upstream tarball under
#     /apache-zookeeper-*-bin, Java under $JAVA_HOME, logback.xml in /conf;
#   - the image `make images` builds from Debian packages:
#     /usr/share/java/zookeeper.jar (its manifest names its dependencies),
#     slf4j-simple for logging, and netty-codec and netty-resolver, which
#     the manifest leaves out and a secure client port needs.
# Used by internal/testsupport/testserver's docker provider (embedded) and by
# docker-compose.yml (mounted), so both start ZooKeeper the same way.
set -eu
cfg=$1
shift
java=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
	java=$JAVA_HOME/bin/java
fi
cp=
for jar in /apache-zookeeper-*/lib/*.jar; do
	if [ -f "$jar" ]; then cp=$cp:$jar; fi
done
if [ -n "$cp" ]; then
	cp=${cp#:}
	if [ -f /conf/logback.xml ]; then
		set -- "$@" -Dlogback.configurationFile=/conf/logback.xml
	fi
elif [ -f /usr/share/java/zookeeper.jar ]; then
	cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
	for jar in /usr/share/java/netty-codec.jar /usr/share/java/netty-resolver.jar; do
		if [ -f "$jar" ]; then cp=$cp:$jar; fi
	done
else
	echo "zkstart.sh: no ZooKeeper jars in /apache-zookeeper-*/lib or /usr/share/java" >&2
	exit 1
fi
exec "$java" "$@" -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
