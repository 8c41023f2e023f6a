"""A user's real-time query that does not start (input of the eval task fix-rtm-rules)."""


def save(batch_df, batch_id):
    batch_df.write.mode("append").saveAsTable("alerts")


def start(events, writer, checkpoint):
    return (events.where("severity >= 3")
            .writeStream
            .foreachBatch(save)
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="1 second")
            .start())
