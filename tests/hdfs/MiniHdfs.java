// A one-DataNode HDFS (Hadoop's MiniDFSCluster) on 127.0.0.1, for the tests (tests/_hdfs.py).
//   java -cp <hadoop-client-minicluster + api + runtime> MiniHdfs BASE_DIR WATCHED_PID
// Prints "READY hdfs://127.0.0.1:<port>" once the NameNode and DataNode are up. Stops (and
// deletes nothing: BASE_DIR is the caller's) on SIGTERM, and by itself as soon as the process
// WATCHED_PID (the test run) is gone, so a test run killed with SIGKILL leaves no cluster behind.
import java.io.File;
import java.util.Optional;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniHdfs {
  public static void main(String[] args) throws Exception {
    File base = new File(args[0]).getAbsoluteFile();
    long watched = Long.parseLong(args[1]);
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath());
    conf.setBoolean("dfs.permissions.enabled", false);  // the test user writes anywhere
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.setInt("dfs.replication", 1);
    conf.setLong("dfs.blocksize", 1L << 20);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
        .nameNodePort(0).numDataNodes(1).format(true).checkDataNodeAddrConfig(true).build();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    cluster.waitActive();
    System.out.println("READY hdfs://127.0.0.1:" + cluster.getNameNodePort());
    System.out.flush();
    while (true) {
      Optional<ProcessHandle> parent = ProcessHandle.of(watched);
      if (parent.isEmpty() || !parent.get().isAlive()) {
        System.out.println("watched process " + watched + " is gone: stopping");
        System.exit(0);  // runs the shutdown hook
      }
      Thread.sleep(1000);
    }
  }
}
