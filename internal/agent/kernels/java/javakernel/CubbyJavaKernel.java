// Cubby's launcher of the Rapaio Java kernel (JShell in the kernel's JVM):
// `java -cp <rapaio jar>:<dir of this class> CubbyJavaKernel <connection file>`.
//
// It starts the kernel as Rapaio's own main does, with these differences:
//   - a shell or control message that arrives while the kernel binds its
//     sockets (before its handlers are registered) is dropped with a log line
//     instead of killing the channel's thread (Rapaio 3.0.1 leaves the handler
//     table null until every socket is bound); the client repeats its
//     kernel_info_request until one is answered;
//   - the record methods of MessageType (linked on first use) are linked on
//     the main thread before the channel threads start: linking them on two
//     threads at once sometimes left the shell thread waiting forever;
//   - values are displayed as text/plain, as a Jupyter Java kernel's results
//     usually are (Rapaio's default is text/html), so that SDKs read them as
//     the execution's text.
// Transport: TCP only.

import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.logging.LogManager;

import org.rapaio.jupyter.kernel.MainApp;
import org.rapaio.jupyter.kernel.channels.Channels;
import org.rapaio.jupyter.kernel.core.ConnectionProperties;
import org.rapaio.jupyter.kernel.core.Transform;
import org.rapaio.jupyter.kernel.global.Global;
import org.rapaio.jupyter.kernel.message.MessageType;

public final class CubbyJavaKernel {
    private CubbyJavaKernel() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: CubbyJavaKernel <connection file>");
            System.exit(2);
        }
        LogManager.getLogManager().readConfiguration(
                MainApp.class.getClassLoader().getResourceAsStream("logging.properties"));
        ConnectionProperties props = Transform.fromJson(Files.readString(Path.of(args[0])), ConnectionProperties.class);
        if (!"tcp".equals(props.transport())) {
            throw new IllegalArgumentException("transport " + props.transport() + " is not supported; use tcp");
        }
        Global.options().display().defaultMime("text/plain");
        MessageType<?> probe = MessageType.SHELL_KERNEL_INFO_REQUEST;
        if (probe.hashCode() == 0 && !probe.equals(MessageType.UNKNOWN) && probe.toString().isEmpty()) {
            System.err.println("unexpected MessageType");
        }
        Channels channels = new Channels(props);
        Field handlers = Channels.class.getDeclaredField("handlers");
        handlers.setAccessible(true);
        handlers.set(channels, new HashMap<>());
        channels.connect(MainApp.kernel);
        channels.joinUntilClose();
    }
}
