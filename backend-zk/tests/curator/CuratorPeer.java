// A participant that uses Apache Curator's own recipes, driven line by line by the interop tests
// (backend-zk/tests/curator_interop.rs), which compile it with javac against Debian's Curator jars.
//
//   java CuratorPeer CONNECT_STRING KIND PATH [ARG]
//     KIND = read | write      InterProcessReadWriteLock(PATH).readLock() / .writeLock()
//          | semaphore N       InterProcessSemaphoreV2(PATH, N)
//          | latch ID          LeaderLatch(PATH, ID)
//
// It prints "ready" once its session is connected, then reads commands from stdin:
//   acquire           wait until held (a latch: until leading); prints "held DETAIL"
//   try MILLIS        the same, waiting at most MILLIS; prints "held DETAIL" or "busy"
//   release           gives it back; prints "released"
//   cycle N MILLIS    N times: acquire, print "in", hold MILLIS, print "out", wait for a line
//                     "go" (the driver has counted this holder out), release; then "done"
//   leader            (latch) prints "leader ID" as LeaderLatch.getLeader() sees it ("leader -": none)
// and on end of input releases what it holds and exits. Errors print "error MESSAGE" and exit 1.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
    private final String kind;
    private final String path;
    private final String arg;
    private final CuratorFramework client;

    private InterProcessMutex mutex; // a side of the read-write lock
    private InterProcessSemaphoreV2 semaphore;
    private Lease lease;
    private LeaderLatch latch;
    private boolean held;

    private CuratorPeer(String connect, String kind, String path, String arg) {
        this.kind = kind;
        this.path = path;
        this.arg = arg;
        this.client = CuratorFrameworkFactory.newClient(connect, 10_000, 5_000, new ExponentialBackoffRetry(100, 5));
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            fail("usage: CuratorPeer CONNECT_STRING read|write|semaphore N|latch ID PATH");
        }
        CuratorPeer peer = new CuratorPeer(args[0], args[1], args[2], args.length > 3 ? args[3] : null);
        try {
            peer.run();
        } catch (Exception e) {
            fail(e.toString());
        }
        System.exit(0);
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static void fail(String message) {
        say("error " + message.replace('\n', ' '));
        System.exit(1);
    }

    private void run() throws Exception {
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            fail("no ZooKeeper session within 20 s");
        }
        switch (kind) {
            case "read" -> mutex = new InterProcessReadWriteLock(client, path).readLock();
            case "write" -> mutex = new InterProcessReadWriteLock(client, path).writeLock();
            case "semaphore" -> semaphore = new InterProcessSemaphoreV2(client, path, Integer.parseInt(arg));
            case "latch" -> latch = new LeaderLatch(client, path, arg);
            default -> fail("unknown kind " + kind);
        }
        say("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            switch (words[0]) {
                case "acquire" -> {
                    acquire(-1);
                    say("held " + detail());
                }
                case "try" -> say(acquire(Long.parseLong(words[1])) ? "held " + detail() : "busy");
                case "release" -> {
                    release();
                    say("released");
                }
                case "cycle" -> {
                    int rounds = Integer.parseInt(words[1]);
                    long hold = Long.parseLong(words[2]);
                    for (int i = 0; i < rounds; i++) {
                        acquire(-1);
                        say("in");
                        Thread.sleep(hold);
                        say("out");
                        // Released only once the driver has seen "out": what it counts as held
                        // then lies within the real hold, so an overlap it sees is a real one.
                        String go = in.readLine();
                        if (!"go".equals(go == null ? null : go.trim())) {
                            fail("expected go, got " + go);
                        }
                        release();
                    }
                    say("done");
                }
                case "leader" -> {
                    Participant leader = latch.getLeader();
                    say("leader " + (leader.isLeader() ? leader.getId() : "-"));
                }
                case "" -> { }
                default -> fail("unknown command " + line);
            }
        }
        release();
        client.close();
    }

    /** Acquires; waits at most `millis` (negative: without limit). True if held. */
    private boolean acquire(long millis) throws Exception {
        if (held) {
            fail("already held");
        }
        if (mutex != null) {
            if (millis < 0) {
                mutex.acquire();
                held = true;
            } else {
                held = mutex.acquire(millis, TimeUnit.MILLISECONDS);
            }
        } else if (semaphore != null) {
            lease = millis < 0 ? semaphore.acquire() : semaphore.acquire(millis, TimeUnit.MILLISECONDS);
            held = lease != null;
        } else {
            latch.start();
            if (millis < 0) {
                latch.await();
                held = true;
            } else {
                held = latch.await(millis, TimeUnit.MILLISECONDS);
                if (!held) {
                    latch.close();
                    latch = new LeaderLatch(client, path, arg);
                }
            }
        }
        return held;
    }

    private String detail() {
        if (lease != null) {
            return lease.getNodeName();
        }
        if (latch != null) {
            return latch.getOurPath();
        }
        return kind;
    }

    private void release() throws Exception {
        if (!held) {
            return;
        }
        held = false;
        if (mutex != null) {
            mutex.release();
        } else if (semaphore != null) {
            lease.close();
            lease = null;
        } else {
            latch.close();
            latch = new LeaderLatch(client, path, arg);
        }
    }
}
