import java.io.FileOutputStream;
import java.io.FileReader;
import java.io.IOException;
import java.io.ObjectOutputStream;
import java.io.PrintStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

/**
 * Prints every record Debezium's embedded MySQL connector emits, as Kafka Connect's JsonConverter
 * serialises it (schemas on), one JSON object per line on stdout:
 * {@code {"topic": "...", "key": <key JSON or null>, "value": <value JSON or null>}}.
 *
 * <p>Adapted from ../../../shared/bench/debezium/DbzBench.java (the same offset seeding and the
 * same MariaDB driver). Usage: {@code java -cp <classes>:<libs>/* DbzDump run.properties}. Keys
 * starting with {@code dump.} are read here, every other key goes to the engine:
 * {@code dump.start.file}, {@code dump.start.pos} (the binlog position to start from),
 * {@code dump.stop.topic} (stop after the first record on this topic), {@code dump.timeout.s}.
 * Exit status 0 when the stop record arrived, 2 otherwise.
 */
public final class DbzDump {

    private static final CountDownLatch DONE = new CountDownLatch(1);
    private static volatile boolean stopped = false;

    private DbzDump() {
    }

    public static void main(String[] args) throws Exception {
        Properties all = new Properties();
        try (Reader r = new FileReader(args[0], StandardCharsets.UTF_8)) {
            all.load(r);
        }
        Properties props = new Properties();
        for (String k : all.stringPropertyNames()) {
            if (!k.startsWith("dump.")) {
                props.setProperty(k, all.getProperty(k));
            }
        }
        String stopTopic = all.getProperty("dump.stop.topic");
        long timeoutS = Long.parseLong(all.getProperty("dump.timeout.s", "120"));
        seedOffset(props.getProperty("offset.storage.file.filename"), props.getProperty("name"),
                props.getProperty("topic.prefix"), all.getProperty("dump.start.file"),
                Long.parseLong(all.getProperty("dump.start.pos")));
        PrintStream out = new PrintStream(new FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .using((success, message, error) -> {
                    System.err.println("[dump] engine stopped: success=" + success + " " + message);
                    if (error != null) {
                        error.printStackTrace();
                    }
                    DONE.countDown();
                })
                .notifying((List<ChangeEvent<String, String>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                    for (ChangeEvent<String, String> event : records) {
                        if (!stopped) {
                            out.print("{\"topic\":\"" + event.destination() + "\",\"key\":" + event.key()
                                    + ",\"value\":" + event.value() + "}\n");
                            if (event.destination().equals(stopTopic)) {
                                stopped = true;
                                out.flush();
                                DONE.countDown();
                            }
                        }
                        committer.markProcessed(event);
                    }
                    committer.markBatchFinished();
                }).build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        DONE.await(timeoutS, TimeUnit.SECONDS);
        out.flush();
        Thread closer = new Thread(() -> {
            try {
                engine.close();
            }
            catch (IOException | RuntimeException e) {
                System.err.println("[dump] close: " + e);
            }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(10_000);
        System.exit(stopped ? 0 : 2);
    }

    /** The offset file of Kafka's FileOffsetBackingStore holding one binlog position. */
    private static void seedOffset(String file, String engineName, String topicPrefix, String binlogFile, long pos)
            throws IOException {
        String key = "[\"" + engineName + "\",{\"server\":\"" + topicPrefix + "\"}]";
        String value = "{\"file\":\"" + binlogFile + "\",\"pos\":" + pos + "}";
        HashMap<byte[], byte[]> raw = new HashMap<>();
        raw.put(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
        try (ObjectOutputStream o = new ObjectOutputStream(new FileOutputStream(file))) {
            o.writeObject(raw);
        }
    }
}
