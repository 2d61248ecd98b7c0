// Creates (or updates) SCRAM-SHA-256 and SCRAM-SHA-512 credentials of one user on a running
// broker, through the Admin API of the kafka-clients jar. Run by deploy/native/kafka.sh as a
// single-file source program:
//   java -cp "$LIBS/*" AddScramUsers.java BOOTSTRAP USER PASSWORD
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;

public class AddScramUsers {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            // one mechanism per request: a request may alter a user's credentials only once
            for (ScramMechanism mechanism : List.of(ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    args[1], new ScramCredentialInfo(mechanism, 8192), args[2]))).all().get();
            }
        }
    }
}
