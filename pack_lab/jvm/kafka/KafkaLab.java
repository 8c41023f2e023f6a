package rtm.lab;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The lab's Kafka client: create a topic, produce text records, read a whole topic back.
 *
 * <p>Used from Python through py4j inside a SparkSession (this jar and kafka-clients on
 * spark.jars) or as a command line ({@code java -cp rtm-lab-kafka.jar:kafka-clients.jar
 * rtm.lab.KafkaLab create|produce|consume BOOTSTRAP TOPIC [PARTITIONS]}). Records are text
 * lines {@code key<TAB>value} (an empty key is a null key; {@code partition<TAB>key<TAB>value}
 * with {@code produceToPartitions}); a topic is read back as
 * {@code partition<TAB>offset<TAB>timestamp<TAB>key<TAB>value} lines, ordered by partition and offset.
 */
public final class KafkaLab {
  private KafkaLab() {}

  private static Properties common(String bootstrap) {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    return props;
  }

  /** Create {@code topic} with {@code partitions} partitions (replication 1); an existing topic is kept. */
  public static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
    try (Admin admin = Admin.create(common(bootstrap))) {
      admin.createTopics(Collections.singleton(new NewTopic(topic, partitions, (short) 1))).all().get();
    } catch (ExecutionException e) {
      if (!(e.getCause() instanceof TopicExistsException)) {
        throw e;
      }
    }
  }

  private static KafkaProducer<String, String> producer(String bootstrap) {
    Properties props = common(bootstrap);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.LINGER_MS_CONFIG, "2");
    return new KafkaProducer<>(props);
  }

  private static ProducerRecord<String, String> record(String topic, String line, boolean withPartition) {
    String[] parts = line.split("\t", withPartition ? 3 : 2);
    int at = withPartition ? 1 : 0;
    if (parts.length < at + 2) {
      throw new IllegalArgumentException("expected " + (withPartition ? "partition<TAB>" : "")
          + "key<TAB>value, got: " + line);
    }
    String key = parts[at].isEmpty() ? null : parts[at];
    Integer partition = withPartition ? Integer.valueOf(parts[0]) : null;
    return new ProducerRecord<>(topic, partition, key, parts[at + 1]);
  }

  /** One producer per bootstrap address, reused across calls (creating one costs a metadata round trip). */
  private static final Map<String, KafkaProducer<String, String>> PRODUCERS = new HashMap<>();

  private static synchronized KafkaProducer<String, String> sharedProducer(String bootstrap) {
    return PRODUCERS.computeIfAbsent(bootstrap, KafkaLab::producer);
  }

  /** Close the producers {@link #produce} keeps (the JVM exiting closes them too). */
  public static synchronized void closeProducers() {
    for (KafkaProducer<String, String> producer : PRODUCERS.values()) {
      producer.close(Duration.ofSeconds(10));
    }
    PRODUCERS.clear();
  }

  private static long send(String bootstrap, String topic, String lines, boolean withPartition)
      throws Exception {
    long sent = 0;
    KafkaProducer<String, String> producer = sharedProducer(bootstrap);
    List<java.util.concurrent.Future<?>> acks = new ArrayList<>();
    try {
      for (String line : lines.split("\n")) {
        if (!line.isEmpty()) {
          acks.add(producer.send(record(topic, line, withPartition)));
          sent++;
        }
      }
      producer.flush();
      for (java.util.concurrent.Future<?> ack : acks) {
        ack.get();  // surface a failed send
      }
    } catch (Exception e) {
      synchronized (KafkaLab.class) {  // a broken producer is not reused
        PRODUCERS.remove(bootstrap);
      }
      producer.close(Duration.ZERO);
      throw e;
    }
    return sent;
  }

  /** Produce newline-separated {@code key<TAB>value} records; returns how many were acknowledged. */
  public static long produce(String bootstrap, String topic, String lines) throws Exception {
    return send(bootstrap, topic, lines, false);
  }

  /** Produce newline-separated {@code partition<TAB>key<TAB>value} records. */
  public static long produceToPartitions(String bootstrap, String topic, String lines) throws Exception {
    return send(bootstrap, topic, lines, true);
  }

  /** Every record of {@code topic} from the beginning to its current end, as text lines. */
  public static String consume(String bootstrap, String topic, long timeoutMs) {
    Properties props = common(bootstrap);
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    StringBuilder out = new StringBuilder();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      List<TopicPartition> parts = new ArrayList<>();
      List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
      if (infos == null) {
        return "";
      }
      for (PartitionInfo info : infos) {
        parts.add(new TopicPartition(topic, info.partition()));
      }
      parts.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
      consumer.assign(parts);
      consumer.seekToBeginning(parts);
      Map<TopicPartition, Long> end = consumer.endOffsets(parts, Duration.ofMillis(timeoutMs));
      Map<Integer, List<String>> byPartition = new HashMap<>();
      long deadline = System.currentTimeMillis() + timeoutMs;
      while (System.currentTimeMillis() < deadline) {
        boolean done = true;
        for (TopicPartition tp : parts) {
          if (consumer.position(tp) < end.get(tp)) {
            done = false;
          }
        }
        if (done) {
          break;
        }
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          byPartition.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(
              r.partition() + "\t" + r.offset() + "\t" + r.timestamp() + "\t"
                  + (r.key() == null ? "" : r.key()) + "\t" + (r.value() == null ? "" : r.value()));
        }
      }
      for (TopicPartition tp : parts) {
        for (String line : byPartition.getOrDefault(tp.partition(), Collections.emptyList())) {
          out.append(line).append('\n');
        }
      }
    }
    return out.toString();
  }

  /** Command line: create BOOTSTRAP TOPIC PARTITIONS | produce BOOTSTRAP TOPIC (stdin) | consume BOOTSTRAP TOPIC. */
  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      System.err.println("usage: KafkaLab create|produce|consume BOOTSTRAP TOPIC [PARTITIONS]");
      System.exit(2);
    }
    switch (args[0]) {
      case "create":
        createTopic(args[1], args[2], Integer.parseInt(args[3]));
        break;
      case "produce":
        // One record per stdin line, sent as it arrives (the record timestamp is the send time);
        // prints one line per 1,000 records acknowledged and the total at the end.
        try (KafkaProducer<String, String> producer = producer(args[1]);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
          long sent = 0;
          String line;
          while ((line = in.readLine()) != null) {
            if (!line.isEmpty()) {
              producer.send(record(args[2], line, false), (meta, error) -> {
                if (error != null) {
                  System.err.println("KafkaLab: send failed: " + error);
                  System.exit(1);
                }
              });
              sent++;
            }
          }
          producer.flush();
          System.out.println(sent);
        }
        break;
      case "consume":
        System.out.print(consume(args[1], args[2], 60_000));
        break;
      default:
        System.err.println("KafkaLab: unknown command " + args[0]);
        System.exit(2);
    }
  }
}
